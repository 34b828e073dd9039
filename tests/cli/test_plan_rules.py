"""`prfaas plan` under aiconfigurator's rules (issue 30 point 3): the engine's disaggregation
rule in the parallelism search, said when it removed a better plan, and `--margins aic`, said
beside the plan or, without aiconfigurator's package, said missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shared_specs import needs_aic

SCENARIO = """\
name: llama-h200-aic
model: llama-3.1-70b
prfaas: {chip: h200, num_gpus: 8, gpus_per_instance: 8}
pd: {chip: h200, num_gpus: 16, gpus_per_instance: 8}
link_gbps: 100
decode: {slo_tokens_per_s: 30.3}
workload:
  input: {fixed_tokens: 8000}
  output: {fixed_tokens: 512}
threshold_step_tokens: 100
timing: {source: aic, engine: sglang}
"""
#: Runs the CLI with aiconfigurator's planner package hidden, installed or not.
WITHOUT_AIC_PLANNER = (
    "import sys; sys.modules['aiconfigurator'] = None; "
    "from prfaas.cli.app import main; sys.argv[0] = 'prfaas'; main()"
)


def prfaas(*args: str, hide_aic_planner: bool = False) -> subprocess.CompletedProcess[str]:
    head = ["-c", WITHOUT_AIC_PLANNER] if hide_aic_planner else ["-m", "prfaas"]
    return subprocess.run(
        [sys.executable, *head, *args], capture_output=True, text=True, check=False
    )


@pytest.fixture
def scenario(tmp_path: Path) -> str:
    path = tmp_path / "llama.yaml"
    path.write_text(SCENARIO)
    return str(path)


@needs_aic
def test_the_plan_says_what_sglangs_rule_removed(scenario: str) -> None:
    ruled = prfaas("plan", "--scenario", scenario, "--search-parallelism", "--json")
    free = prfaas(
        "plan", "--scenario", scenario, "--search-parallelism", "--no-engine-rules", "--json"
    )
    assert ruled.returncode == 0 and free.returncode == 0, ruled.stderr + free.stderr
    ruled_json, free_json = json.loads(ruled.stdout), json.loads(free.stdout)
    lines = [n for n in ruled_json["timing"]["notes"] if n.startswith("engine rule:")]
    free_best = free_json["prfaas_pd"]["lambda_max"]
    ruled_best = ruled_json["prfaas_pd"]["lambda_max"]
    assert lines == [
        "engine rule: the best plan without it (PrfaaS tp8, PD-P tp2, PD-D tp4: "
        f"{free_best:.2f} req/s against {ruled_best:.2f}) is not deployable: PD-P -> PD-D: "
        "sglang pairs prefill and decode of the same attention TP only (tp2 prefill, tp4 "
        "decode) (--no-engine-rules plans it anyway)"
    ]
    assert ruled_json["timing"]["pd_roles_share_shape"]  # tp2 both: one TP
    assert not any(n.startswith("engine rule:") for n in free_json["timing"]["notes"])
    table = prfaas("plan", "--scenario", scenario, "--search-parallelism", "--format", "tsv")
    assert lines[0] in table.stdout + table.stderr  # notes go to stderr beside a TSV table


def test_no_engine_rules_needs_the_search() -> None:
    result = prfaas("plan", "--no-engine-rules")
    assert result.returncode == 2
    assert "--no-engine-rules widens the parallelism search" in result.stderr


def test_without_aiconfigurators_package_the_margins_are_a_line_and_the_plan_is_plain() -> None:
    plain = prfaas("plan", "--json")
    asked = prfaas("plan", "--json", "--margins", "aic", hide_aic_planner=True)
    assert asked.returncode == 0, asked.stderr
    plain_json, asked_json = json.loads(plain.stdout), json.loads(asked.stdout)
    assert asked_json["timing"]["notes"] == [
        "margins: aic asked for, but the aiconfigurator package (aiconfigurator's planner, "
        "beside aiconfigurator-core) is not installed; planned without margins"
    ]
    assert asked_json["prfaas_pd"] == plain_json["prfaas_pd"]


def test_aiconfigurators_margins_are_printed_beside_the_plan() -> None:
    pytest.importorskip("aiconfigurator.sdk.task_v2")
    plain = json.loads(prfaas("plan", "--json").stdout)
    result = prfaas("plan", "--json", "--margins", "aic")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (line,) = report["timing"]["notes"]
    assert line.startswith("margins: aiconfigurator ")
    assert (
        "prefill latency x1.1, decode latency x1.08, prefill rate x0.9, decode rate x0.92" in line
    )
    assert report["prfaas_pd"]["lambda_max"] < plain["prfaas_pd"]["lambda_max"]
