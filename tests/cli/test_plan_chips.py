"""`prfaas plan --timing aic --search-parallelism` on chips beyond the paper's (issue 30): a
catalog chip added for aiconfigurator's systems (GB200) and a chip the scenario describes
itself, in a subprocess, to the end; and the plan on it written with `--deployment-out`,
which carries the described chip (`chips:`) and `prfaas up` brings up and serves from, live
(real processes on loopback, emulated backend; the file's checks:
tests/serve/test_deployment_chips.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from prfaas.planner import load_scenario
from prfaas.serve.backends.emulated import instance_profile
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher
from prfaas.specs import aic
from shared_specs import H100_NVL, needs_aic

SCENARIO = {
    "name": "gb200-prfaas-h100-nvl-pd",
    "model": "qwen3-235b",
    "prfaas": {"chip": "gb200", "num_gpus": 8, "gpus_per_instance": 8},
    "pd": {"chip": "h100-nvl", "num_gpus": 16, "gpus_per_instance": 8},
    "link_gbps": 100,
    "decode": {"slo_tokens_per_s": 30},
    "workload": {
        "input": {"lognormal": {"mu": 9.0, "sigma": 1.0, "min_tokens": 128, "max_tokens": "32K"}},
        "output": {"fixed_tokens": 512},
    },
    "chips": {"h100-nvl": H100_NVL},
}


@needs_aic
def test_plan_searches_parallelism_on_a_new_chip_and_a_described_one(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    result = subprocess.run(
        [sys.executable, "-m", "prfaas", "plan", "--scenario", str(path), "--timing", "aic",
         "--search-parallelism", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    timing = report["timing"]
    assert timing["notes"] == []  # both timed by aiconfigurator, no fallback
    assert timing["prfaas"].startswith(f"aiconfigurator {aic.aic_version()} (sglang ")
    assert ", gb200, " in timing["prfaas"]
    assert ", h100_sxm, " in timing["pd"]
    assert report["prfaas_pd"]["lambda_max"] > 0
    # Priced by the chips' own prices: 8 x GB200 at 3.3 and 16 x H100 NVL at 1.9.
    assert report["prfaas_pd"]["price"] == pytest.approx(8 * 3.3 + 16 * 1.9)


def _plan(tmp_path: Path, *flags: str) -> tuple[Path, Path]:
    """The scenario's file, and the deployment the real `prfaas plan --deployment-out` wrote."""
    scenario, out = tmp_path / "scenario.yaml", tmp_path / "deployment.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    result = subprocess.run(
        [sys.executable, "-m", "prfaas", "plan", "--scenario", str(scenario), *flags,
         "--deployment-out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return scenario, out


def _info(launcher: Launcher, url: str) -> dict[str, Any]:
    response = httpx.get(url + "/info", auth=launcher.instance_auth(), timeout=30)
    assert response.status_code == 200, response.text
    info: dict[str, Any] = response.json()
    return info


@pytest.mark.e2e
def test_a_plan_on_a_described_chip_comes_up_and_serves(tmp_path: Path) -> None:
    scenario_path, path = _plan(tmp_path)
    hardware = load_scenario(str(scenario_path)).hardware
    deployment = load_deployment(path)
    assert list(deployment.chips) == ["h100-nvl"]  # the described chip the plan runs on
    planned = {"prfaas": hardware.prfaas.profile, "pd": hardware.pd.profile}
    for spec in deployment.instances:
        assert deployment.chip_of(spec) == planned[spec.cluster].chip
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "e2e-test-secret-0123456789")
    with Launcher(deployment) as launcher:
        launcher.wait_healthy(timeout_s=180)
        for spec in launcher.deployment.instances:  # each timed as the plan timed its cluster
            timing = _info(launcher, spec.url)["timing"]
            at = timing["lengths_tokens"].index(8192)
            assert timing["prefill_s"][at] == planned[spec.cluster].prefill_s(8192)
        body = {"model": deployment.model, "prompt": "a short prompt " * 4, "max_tokens": 4}
        response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 4
    assert all(child.poll() is not None for child in launcher.children.values())


@needs_aic
def test_a_plan_timed_by_aiconfigurator_writes_the_chip_its_system_times(tmp_path: Path) -> None:
    _, path = _plan(tmp_path, "--timing", "aic", "--search-parallelism")
    deployment = load_deployment(path)
    pd = [spec for spec in deployment.instances if spec.cluster == "pd"]
    assert pd and all(deployment.chip_of(spec).aic_system == "h100_sxm" for spec in pd)
    for spec in pd:
        assert ", h100_sxm, " in instance_profile(deployment, spec).source
