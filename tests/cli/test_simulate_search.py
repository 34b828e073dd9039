"""`prfaas simulate --timing aic --search-parallelism` runs the plan `prfaas plan` reports with
the same options (issue 30): each role in the shape and timing source the search chose, the
planned instance counts; needs the `prfaas[aic]` extra. Bad combinations: one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run

SCENARIO = """
name: aic-small
model: llama-3.1-70b
prfaas: {chip: h200, num_gpus: 8, gpus_per_instance: 8}
pd: {chip: h200, num_gpus: 16, gpus_per_instance: 8}
link_gbps: 100
decode: {slo_tokens_per_s: 30}
workload:
  input: {fixed_tokens: 8000}
  output: {fixed_tokens: 128}
threshold_step_tokens: 100
arrivals: {rate_per_s: 1.0, num_requests: 20}
simulation: {seed: 0, admission: {mode: "off"}}
"""


def _scenario(tmp_path: Path) -> str:
    path = tmp_path / "aic-small.yaml"
    path.write_text(SCENARIO)
    return str(path)


def test_simulate_runs_the_searched_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("aiconfigurator_core")
    options = ["-s", _scenario(tmp_path), "--timing", "aic", "--search-parallelism", "--json"]
    code, out, err = run(["plan", *options], capsys)
    assert code == 0, err
    planned = json.loads(out)
    code, out, err = run(["simulate", *options], capsys)
    assert code == 0, err
    (report,) = json.loads(out)
    shapes, timing = report["shapes"], planned["timing"]
    for role, cluster in (("prfaas", "prfaas"), ("pd_p", "pd"), ("pd_d", "pd_decode")):
        assert shapes[role]["source"] == timing[cluster]
        assert shapes[role]["source"].startswith("aiconfigurator")
        assert shapes[role]["gpus_per_instance"] == timing[f"{cluster}_gpus_per_instance"]
    # the search moved PD off the scenario's 8-GPU instances; the simulator ran its choice
    assert shapes["pd_p"]["gpus_per_instance"] < 8
    point = planned["prfaas_pd"]
    counts = ("n_prfaas", "n_p", "n_d")
    assert [report["deployment"][k] for k in counts] == [point[k] for k in counts]
    assert report["metrics"]["num_completed"] == 20


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--one-pd-shape"], "--one-pd-shape restricts the parallelism search"),
        (["--search-parallelism", "--slo-capacity"], "--slo-capacity and --saturation-seeds"),
        (["--engine", "vllm"], "--engine picks aiconfigurator's data: add --timing aic"),
    ],
)
def test_bad_search_options_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, _, err = run(["simulate", "-s", _scenario(tmp_path), *extra], capsys)
    assert code == 2
    assert message in err
