"""`prfaas plan --deployment-out` (issue 30): the plan is written as a deployment file that the
loader and preflight of `prfaas up` accept, with the searched instance shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_helpers import run

from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.preflight import Scope, check_deployment
from prfaas.specs.catalog import get_model
from prfaas.specs.timing import default_parallelism

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def test_plan_writes_a_deployment_prfaas_up_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "deployment.yaml"
    code, stdout, _ = run(
        ["plan", "-s", str(DENSE_70B), "--search-parallelism", "--deployment-out", str(out)],
        capsys,
    )
    assert code == 0
    assert "timing roofline" in stdout
    deployment = load_deployment(out)
    assert check_deployment(deployment, Scope.ALL, secret_generated=True) == []
    roles = [spec.role.value for spec in deployment.instances]
    assert roles.count("prfaas-prefill") >= 1
    assert roles.count("pd-decode") >= 1
    assert deployment.model == "llama-3.1-70b"
    assert {spec.chip for spec in deployment.instances} == {"h200", "h20"}


def test_a_plan_with_a_shape_per_pd_role_is_written_without_role_flips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # On dense-70b the search gives PD-P instances of 2 GPUs and PD-D instances of 8: the
    # slow loop would flip one into a role whose shape differs, so the file turns it off.
    out = tmp_path / "deployment.yaml"
    code, stdout, _ = run(
        ["plan", "-s", str(DENSE_70B), "--search-parallelism", "--deployment-out", str(out)],
        capsys,
    )
    assert code == 0
    assert "PD-P and PD-D have different shapes" in stdout
    deployment = load_deployment(out)
    assert check_deployment(deployment, Scope.ALL, secret_generated=True) == []
    assert deployment.rebalance.enabled is False
    shapes = {
        role: {s.gpus_per_instance for s in deployment.instances if s.role.value == role}
        for role in ("pd-prefill", "pd-decode")
    }
    assert shapes == {"pd-prefill": {2}, "pd-decode": {8}}
    assert "slow loop is off" in out.read_text()


def test_one_pd_shape_keeps_role_flips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deployment.yaml"
    args = ["plan", "-s", str(DENSE_70B), "--search-parallelism", "--one-pd-shape"]
    code, stdout, _ = run([*args, "--deployment-out", str(out)], capsys)
    assert code == 0
    assert "different shapes" not in stdout
    deployment = load_deployment(out)
    assert deployment.rebalance.enabled is True
    pd = {s.gpus_per_instance for s in deployment.instances if s.role.value.startswith("pd-")}
    assert len(pd) == 1


def test_one_pd_shape_needs_the_search(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["plan", "--one-pd-shape"], capsys)
    assert code == 2
    assert "--one-pd-shape restricts the parallelism search" in err


def test_engine_without_aic_timing_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["plan", "--engine", "vllm"], capsys)
    assert code == 2
    assert "--engine picks aiconfigurator's data: add --timing aic" in err


def test_the_file_carries_each_instances_split_and_timing_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the roofline times a GPU count: the search offers its default split only, and the file
    # says so, so `prfaas up` times every instance as the plan did
    out = tmp_path / "deployment.yaml"
    code, _, _ = run(
        ["plan", "-s", str(DENSE_70B), "--search-parallelism", "--deployment-out", str(out)],
        capsys,
    )
    assert code == 0
    raw = yaml.safe_load(out.read_text())
    for instance in raw["instances"]:
        gpus = instance["gpus_per_instance"]
        assert instance["parallelism"] == {"tp": gpus, "dp": 1, "ep": 1}  # dense: ep 1
        assert instance["timing"] == {"source": "roofline"}
    deployment = load_deployment(out)
    model = get_model(deployment.model)
    for spec in deployment.instances:
        assert deployment.split_of(spec) == default_parallelism(model, spec.gpus_per_instance)
