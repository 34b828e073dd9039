"""`prfaas up` on the file `prfaas plan --deployment-out` writes for a plan with two PD shapes
(issue 30), live: real processes on loopback (emulated backend, no torch).

The scenario is the dense 70B of tests/sim/data/dense-70b.yaml on fewer GPUs: the parallelism
search gives PD-P instances of 2 H20 and a PD-D instance of 4. The deployment comes up, serves
a request through PD-P and PD-D, and refuses a flip by hand into a role whose shape differs
(400 naming both shapes with their splits, docs/serving.md; flips between instances of one
shape: tests/serve/test_role_flips.py; splits that differ on one GPU count:
tests/serve/test_flip_splits.py; a plan timed by aiconfigurator at its searched splits:
tests/serve/test_planned_split_deployment.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from prfaas.cli.app import main
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def _plan(tmp_path: Path) -> Path:
    """The small two-shape plan, written by the real `prfaas plan --deployment-out`."""
    scenario = yaml.safe_load(DENSE_70B.read_text())
    scenario["prfaas"] = {"chip": "h200", "num_gpus": 2, "gpus_per_instance": 2}
    scenario["pd"] = {"chip": "h20", "num_gpus": 16, "gpus_per_instance": 8}
    scenario_path, out = tmp_path / "scenario.yaml", tmp_path / "deployment.yaml"
    scenario_path.write_text(yaml.safe_dump(scenario))
    with pytest.raises(SystemExit) as exit_info:
        main(
            ["plan", "-s", str(scenario_path), "--search-parallelism", "--deployment-out", str(out)]
        )
    assert exit_info.value.code == 0
    return out


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    deployment = load_deployment(_plan(tmp_path_factory.mktemp("plan")))
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "e2e-test-secret-0123456789")
    launcher = Launcher(deployment)
    launcher.start()
    try:
        launcher.wait_healthy(timeout_s=120)
        yield launcher
    finally:
        launcher.stop()
    assert all(child.poll() is not None for child in launcher.children.values())


def _shapes(launcher: Launcher) -> dict[str, set[int]]:
    specs = launcher.deployment.instances
    return {
        role: {s.gpus_per_instance for s in specs if s.role.value == role}
        for role in ("pd-prefill", "pd-decode")
    }


def _flip(launcher: Launcher, name: str, role: str) -> httpx.Response:
    url = f"{launcher.url}/admin/instances/{name}/role"
    return httpx.post(url, json={"role": role}, headers=launcher.admin_headers, timeout=30)


def test_the_written_file_comes_up_and_serves(launcher: Launcher) -> None:
    assert _shapes(launcher) == {"pd-prefill": {2}, "pd-decode": {4}}
    assert launcher.deployment.rebalance.enabled is False
    body = {"model": launcher.deployment.model, "prompt": "a short prompt " * 4, "max_tokens": 4}
    response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4


def test_a_flip_into_a_role_of_another_shape_is_refused(launcher: Launcher) -> None:
    refused = _flip(launcher, "pdp-0", "pd-decode")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error"
    # both shapes with their splits (dense: tensor parallel over the instance's GPUs)
    assert "pdp-0 (2 x h20 tp2) cannot take pd-decode" in error["message"]
    assert "pd-decode instances are 4 x h20 tp4 (" in error["message"]
    assert _flip(launcher, "pdd-0", "pd-prefill").status_code == 400
    state = httpx.get(launcher.url + "/admin/state", headers=launcher.admin_headers, timeout=30)
    roles = {i["name"]: (i["role"], i["draining"]) for i in state.json()["instances"]}
    assert roles["pdp-0"] == ("pd-prefill", False) and roles["pdd-0"] == ("pd-decode", False)
