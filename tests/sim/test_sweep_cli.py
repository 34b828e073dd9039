"""`prfaas simulate --time-scales`: a load sweep as JSON (with the plot) and as a table."""

from __future__ import annotations

import json
from pathlib import Path

from sim_fixtures import write_scenario, write_trace
from typer.testing import CliRunner

from prfaas.cli.app import app

runner = CliRunner()


def _args(tmp_path: Path) -> list[str]:
    trace = write_trace(tmp_path, num=40)
    path = write_scenario(tmp_path, simulation={"prefix_cache_gib": 64, "slo": {"ttft_s": 10}})
    return [
        "simulate",
        "-s",
        str(path),
        "--trace",
        str(trace),
        "--compare",
        "prfaas,homogeneous",
        "--time-scales",
        "1,0.5",
    ]


def test_sweep_json_and_plot(tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    result = runner.invoke(app, [*_args(tmp_path), "--json", "--plot-dir", str(plots)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["schema"] == "prfaas.simulation-sweep/1"
    assert [(r["time_scale"], r["policy"]) for r in out["rows"]] == [
        (1.0, "prfaas"),
        (1.0, "homogeneous"),
        (0.5, "prfaas"),
        (0.5, "homogeneous"),
    ]
    assert set(out["saturation"]) == {"prfaas", "homogeneous"}
    assert (plots / "sweep.png").exists()


def test_sweep_table_and_bad_scales(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path))
    assert result.exit_code == 0, result.output
    assert "Time-scale sweep" in result.stdout
    assert "homogeneous: saturation" in result.stdout
    bad = runner.invoke(app, [*_args(tmp_path)[:-1], "1,fast"])
    assert bad.exit_code != 0
