"""`prfaas simulate`: table, JSON, compare, plots and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from prfaas.cli.app import app

runner = CliRunner()

SCENARIO = """
name: cli
model: prfaas-1t
prfaas: {chip: h200, num_gpus: 32, gpus_per_instance: 8}
pd: {chip: h20, num_gpus: 64, gpus_per_instance: 8}
link_gbps: 100
decode: {slo_tokens_per_s: 40}
workload:
  input: {lognormal: {mu: 9.9, sigma: 1.0, min_tokens: 128, max_tokens: 128K}}
  output: {fixed_tokens: 32}
arrivals: {process: poisson, rate_per_s: 2.0, num_requests: 100}
simulation: {slo: {ttft_s: 10}}
"""


def scenario(tmp_path: Path) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return str(path)


def test_json_compare_and_plots(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "-s",
            scenario(tmp_path),
            "--compare",
            "prfaas,homogeneous",
            "--json",
            "--plot-dir",
            str(tmp_path / "plots"),
        ],
    )
    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert [r["policy"] for r in reports] == ["prfaas", "homogeneous"]
    assert reports[0]["metrics"]["schema"] == "prfaas.metrics/1"
    assert reports[0]["metrics"]["num_completed"] == 100
    assert (tmp_path / "plots" / "timelines.png").exists()


def test_table_output(tmp_path: Path) -> None:
    result = runner.invoke(app, ["simulate", "-s", scenario(tmp_path), "--policy", "dynamo"])
    assert result.exit_code == 0, result.output
    assert "dynamo" in result.stdout and "goodput" in result.stdout


def test_bad_policy_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prfaas", "simulate", "-s", scenario(tmp_path), "-p", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("prfaas: error: unknown policy 'nope'")
    assert len(proc.stderr.strip().splitlines()) == 1
