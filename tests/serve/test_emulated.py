"""The `emulated` backend: deployment-file validation, and a small emulated deployment as real
processes on loopback (router, PrfaaS h200, PD-P h20, PD-D h20; prfaas-1t, no torch).

Time is scaled down (time_factor 0.01) so the test is quick; no assertion reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_instance, running

from prfaas.serve.backends.emulated import layer_bytes, output_token
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    EmulationSpec,
    InstanceRole,
    RouterSpec,
    load_deployment,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.instance.runtime import build_runtime
from prfaas.serve.launch.launcher import Launcher
from prfaas.specs.catalog import get_chip, get_model, profile_for

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
BYTE_FACTOR = 1 / 1024
SHORT = "a short prompt " * 4  # 61 tokens <= t
LONG = "a much longer prompt " * 20  # 421 tokens > t = 128


def _scaled_kv_bytes(chip: str, num_tokens: int) -> int:
    profile = profile_for(get_model("prfaas-1t"), get_chip(chip), 8)
    return round(profile.cache_bytes(num_tokens) * BYTE_FACTOR)


# --- deployment files --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["case-study-prfaas-pd.yaml", "case-study-homogeneous.yaml", "case-study-naive.yaml"]
)
def test_the_scaled_case_study_files_load(name: str) -> None:
    d = load_deployment(CONFIGS / name)
    assert len(d.instances) == 12
    assert d.backend is Backend.EMULATED and d.model == "prfaas-1t"
    assert d.link.rate_gbps == pytest.approx(
        100 * d.emulation.byte_factor / d.emulation.time_factor
    )


BASE = "model: prfaas-1t\ninstances:\n"


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        ("  - {name: a, role: pd-decode, cluster: pd, backend: emulated}\n", "needs a chip"),
        ("  - {name: a, role: pd-decode, cluster: pd, chip: h20}\n", "emulated instances only"),
        (
            "  - {name: a, role: pd-decode, cluster: pd, backend: emulated, chip: tpu9}\n",
            "unknown chip 'tpu9'",
        ),
        ("  - {name: a, role: pd-decode, cluster: pd, backend: jax}\n", "instances.0.backend"),
        (
            "  - {name: a, role: pd-prefill, cluster: pd, backend: emulated, chip: h20}\n"
            "  - {name: b, role: pd-decode, cluster: pd}\n",
            "mix the torch and emulated",
        ),
    ],
)
def test_bad_backend_fields_are_one_line_errors(
    tmp_path: Path, instances: str, message: str
) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(BASE + instances)
    with pytest.raises(DeploymentError) as err:
        load_deployment(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_emulation_needs_a_catalog_model_and_sane_factors(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    inst = "  - {name: a, role: pd-decode, cluster: pd, backend: emulated, chip: h20}\n"
    path.write_text("model: tiny-qwen3-next\ninstances:\n" + inst)
    with pytest.raises(DeploymentError, match="catalog model"):
        load_deployment(path)
    path.write_text("model: prfaas-1t\nemulation: {byte_factor: 2}\ninstances:\n" + inst)
    with pytest.raises(DeploymentError, match=r"emulation\.byte_factor"):
        load_deployment(path)


def test_layer_bytes_add_up_and_outputs_are_deterministic() -> None:
    model = get_model("prfaas-1t")
    sizes = layer_bytes(model, 27_000, 2_561_718)
    assert len(sizes) == model.num_layers and sum(n for _, n in sizes) == 2_561_718
    assert {g for g, _ in sizes} == {0, 1}
    assert [output_token([1, 2, 3], i) for i in range(8)] == [
        output_token([1, 2, 3], i) for i in range(8)
    ]


def test_an_output_text_is_said_byte_by_byte_whatever_the_prompt() -> None:
    script = "a\u2028\u20ac".encode()
    said = bytes(output_token([1, 2, 3][: n % 3 + 1], n, script) for n in range(2 * len(script)))
    assert said.decode() == "a\u2028\u20ac" * 2


# --- a live emulated deployment ------------------------------------------------------------


def _deployment(payload_checks: bool) -> Deployment:
    return Deployment(
        model="prfaas-1t",
        block_tokens=16,
        threshold_tokens=128,
        payload_checks=payload_checks,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=0.01, byte_factor=BYTE_FACTOR),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )


@pytest.mark.parametrize("checks", [True, False])
def test_every_instance_transfers_with_the_deployment_payload_check_setting(
    checks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", "unit-test-secret-0123456789")
    deployment = _deployment(checks)
    for spec in deployment.instances:
        assert build_runtime(deployment, spec.name).transfer_config.payload_checks is checks


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """The live deployment of this module runs with payload checks off (test_e2e's torch
    deployments run them on), so both settings cross real links end to end."""
    with running(_deployment(payload_checks=False), timeout_s=60) as launcher:
        yield launcher


def _complete(launcher: Launcher, prompt: str, max_tokens: int = 6) -> dict[str, Any]:
    body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": max_tokens}
    response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.e2e
def test_both_paths_ship_the_scaled_kv_bytes(launcher: Launcher) -> None:
    short, long = _complete(launcher, SHORT), _complete(launcher, LONG)
    assert short["prfaas"]["path"] == "pd-p" and long["prfaas"]["path"] == "prfaas"
    assert short["prfaas"]["reason"] and long["prfaas"]["reason"]
    # prompt tokens: <bos> + one per byte; PD-P runs on h20, PrfaaS on h200
    assert short["prfaas"]["kv_bytes"] == _scaled_kv_bytes("h20", len(SHORT) + 1)
    assert long["prfaas"]["kv_bytes"] == _scaled_kv_bytes("h200", len(LONG) + 1)
    assert long["usage"]["completion_tokens"] == 6 and len(long["choices"][0]["text"]) == 6


@pytest.mark.e2e
def test_a_repeated_prompt_hits_its_prefix_and_gives_the_same_text(launcher: Launcher) -> None:
    prompt = "repeat me, please " * 24  # 433 tokens: PrfaaS
    first, again = _complete(launcher, prompt), _complete(launcher, prompt)
    assert first["prfaas"]["hit_tokens"] == 0
    assert again["prfaas"]["hit_tokens"] == (len(prompt) + 1 - 1) // 16 * 16
    assert again["choices"][0]["text"] == first["choices"][0]["text"]


@pytest.mark.e2e
def test_streaming_works_and_the_instances_never_import_torch(launcher: Launcher) -> None:
    body = {"model": "prfaas-1t", "prompt": SHORT, "max_tokens": 4, "stream": True}
    with httpx.stream("POST", launcher.url + "/v1/completions", json=body, timeout=60) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and len(lines) >= 3
    for child in launcher.children.values():
        assert "libtorch" not in Path(f"/proc/{child.pid}/maps").read_text()
