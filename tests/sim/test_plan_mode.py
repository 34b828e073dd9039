"""Trace planning tells the truth by default (issue 27): per-instance pools unless told
otherwise, the trace mode beside every figure, and `simulate` running the deployment the
reported plan chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_fixtures import write_scenario, write_trace

from prfaas.cli.app import main
from prfaas.planner.scenario import build_scenario, read_scenario_file
from prfaas.sim.api import simulate_scenario
from prfaas.sim.config import build_run_config


def _scenario(tmp_path: Path) -> Path:
    trace = write_trace(tmp_path)
    return write_scenario(
        tmp_path,
        workload={"trace": {"path": trace.name, "cache_capacity_blocks": None}},
        arrivals={"process": "trace", "time_scale": 1.0},
        simulation={"prefix_cache_gib": 512, "slo": {"ttft_s": 10}},
    )


def _plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", *args])
    return int(exit_info.value.code or 0), capsys.readouterr().out


def test_plan_is_pool_aware_by_default_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = str(_scenario(tmp_path))
    code, out = _plan(["--scenario", scenario, "--json"], capsys)
    assert code == 0
    report = json.loads(out)
    modes = {name: report[name]["trace_mode"] for name in ("prfaas_pd", "homogeneous_pd")}
    assert modes == {"prfaas_pd": "pool-aware", "homogeneous_pd": "pool-aware"}
    assert report["naive_heterogeneous"]["trace_mode"] == "ideal"
    pooled = {p["deployment"]: p["lambda_max"] for p in report["pool_aware"]}
    assert report["prfaas_pd"]["lambda_max"] == pooled["prfaas_pd"]
    code, ideal_out = _plan(["--scenario", scenario, "--json", "--no-pool-aware"], capsys)
    ideal = json.loads(ideal_out)
    assert code == 0 and ideal["prfaas_pd"]["trace_mode"] == "ideal" and "pool_aware" not in ideal
    code, table = _plan(["--scenario", scenario], capsys)
    (mode_row,) = [line for line in table.splitlines() if "trace mode" in line]
    assert mode_row.count("pool-aware") == 2 and mode_row.count("ideal") == 2


def test_simulate_runs_the_deployment_the_plan_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = _scenario(tmp_path)
    code, out = _plan(["--scenario", str(scenario), "--json"], capsys)
    assert code == 0
    reported = json.loads(out)
    code, ideal_out = _plan(["--scenario", str(scenario), "--json", "--no-pool-aware"], capsys)
    ideal = json.loads(ideal_out)["prfaas_pd"]
    # The two plans differ here, so matching the reported one is not a coincidence.
    assert (ideal["n_p"], ideal["threshold_tokens"]) != (
        reported["prfaas_pd"]["n_p"],
        reported["prfaas_pd"]["threshold_tokens"],
    )
    body, base_dir = read_scenario_file(str(scenario))
    resolved = build_scenario(body, base_dir, scenario.name)
    for policy, name in (("prfaas", "prfaas_pd"), ("homogeneous", "homogeneous_pd")):
        d = build_run_config(resolved, body, base_dir, policy).deployment
        point = reported[name]
        assert (d.n_prfaas, d.n_p, d.n_d) == (point["n_prfaas"], point["n_p"], point["n_d"])
    t = build_run_config(resolved, body, base_dir, "prfaas").deployment.threshold_tokens
    assert t == reported["prfaas_pd"]["threshold_tokens"]
    assert simulate_scenario(str(scenario), "prfaas").report.plan_mode == "pool-aware"
