"""`prfaas plan --timing aic --search-parallelism --deployment-out` then `prfaas up`, live (issue
30): the deployment that runs is the one planned. Real processes on loopback (emulated backend,
no torch); needs the `prfaas[aic]` extra.

Scenario: Qwen3-235B (MoE) on 4 + 8 H200, which aiconfigurator covers, so every instance is
timed by its data at the split the search chose (today: PrfaaS tp4 ep4, PD tp4 with tensor
parallel experts, not the default tp4 ep4). Each instance reports what times it in /info.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from prfaas.cli.app import main
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher
from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.timing import time_instance

pytestmark = pytest.mark.e2e
pytest.importorskip("aiconfigurator_core")

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def _plan(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The deployment the real `prfaas plan` writes, and the plan's own JSON report."""
    scenario = yaml.safe_load(DENSE_70B.read_text())
    scenario["model"] = "qwen3-235b"
    scenario["prfaas"] = {"chip": "h200", "num_gpus": 4, "gpus_per_instance": 4}
    scenario["pd"] = {"chip": "h200", "num_gpus": 8, "gpus_per_instance": 4}
    scenario_path, out = tmp_path / "scenario.yaml", tmp_path / "deployment.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario))
    args = ["plan", "-s", str(scenario_path), "--search-parallelism", "--timing", "aic"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exit_info:
        main([*args, "--json", "--deployment-out", str(out)])
    assert exit_info.value.code == 0
    return out, json.loads(printed.getvalue())


@pytest.fixture(scope="module")
def planned(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Launcher, dict[str, Any]]]:
    path, report = _plan(tmp_path_factory.mktemp("plan"))
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "e2e-test-secret-0123456789")
    launcher = Launcher(load_deployment(path))
    launcher.start()
    try:
        launcher.wait_healthy(timeout_s=120)
        yield launcher, report
    finally:
        launcher.stop()
    assert all(child.poll() is not None for child in launcher.children.values())


def test_every_instance_is_written_as_the_plan_timed_it(
    planned: tuple[Launcher, dict[str, Any]],
) -> None:
    launcher, report = planned
    timing = report["timing"]
    for spec in launcher.deployment.instances:
        assert spec.timing is not None and spec.parallelism is not None
        assert (str(spec.timing.source), str(spec.timing.engine)) == ("aic", "sglang")
        cluster = {"prfaas-prefill": "prfaas", "pd-prefill": "pd", "pd-decode": "pd_decode"}
        planned_source = timing[cluster[spec.role.value]]
        # the plan's profile names its split: the file carries that split
        assert planned_source.endswith(f", {spec.parallelism.split().label()})")
        assert spec.gpus_per_instance == timing[f"{cluster[spec.role.value]}_gpus_per_instance"]


def test_each_instance_runs_timed_by_its_source_at_its_split(
    planned: tuple[Launcher, dict[str, Any]],
) -> None:
    launcher, _ = planned
    deployment = launcher.deployment
    model = get_model(deployment.model)
    for spec in deployment.instances:
        assert spec.chip is not None and spec.timing is not None
        split = deployment.split_of(spec)
        assert split is not None
        expected = time_instance(model, get_chip(spec.chip), split, spec.timing.choice())
        assert expected.fallback is None
        info = httpx.get(spec.url + "/info", auth=launcher.instance_auth(), timeout=30).json()
        assert info["timing"]["source"] == f"{expected.profile.source} x time_factor 1.0"
        assert "aiconfigurator" in info["timing"]["source"]


def test_the_planned_deployment_serves_a_request(
    planned: tuple[Launcher, dict[str, Any]],
) -> None:
    launcher, _ = planned
    body = {"model": launcher.deployment.model, "prompt": "a short prompt " * 4, "max_tokens": 4}
    response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4
