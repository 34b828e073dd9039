"""`prfaas bench`: JSON and table output, --save, and one-line errors with partial reports."""

from __future__ import annotations

import json
from pathlib import Path

from bench_fake_server import FakeServer
from typer.testing import CliRunner

from prfaas.cli.app import app

runner = CliRunner()


def test_json_report_with_goodput_and_save(fake_server: FakeServer, tmp_path: Path) -> None:
    saved = tmp_path / "out.json"
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=32,out=4"]
    args += ["--num-requests", "6", "--rate", "200", "--burstiness", "0.5", "--json"]
    args += ["--goodput", "ttft:60000,tpot:60000", "--save", str(saved)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == json.loads(saved.read_text())
    metrics = report["metrics"]
    assert metrics["schema"] == "prfaas.metrics/1"
    assert (metrics["num_completed"], metrics["num_failed"]) == (6, 0)
    assert metrics["goodput_per_s"] == metrics["request_throughput_per_s"]
    assert metrics["slo"] == {"ttft_s": 60.0, "tpot_s": 60.0}


def test_table_output(fake_server: FakeServer) -> None:
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=8,out=3"]
    result = runner.invoke(app, [*args, "--num-requests", "3"])
    assert result.exit_code == 0, result.output
    assert "TTFT mean / P50 / P90 / P99 (ms)" in result.stdout
    assert "3 / 0" in result.stdout


def test_unreachable_is_one_line_without_an_empty_report(closed_port_url: str) -> None:
    for fmt in ("--json", "--format=table"):
        args = ["bench", "--endpoint", closed_port_url, "--workload", "fixed:in=8,out=3", fmt]
        result = runner.invoke(app, args)
        assert result.exit_code == 1
        assert result.stdout == ""  # no report of nothing, titled "None"
        assert result.stderr.startswith("prfaas: error: cannot connect to")
        assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_trace_line_reports_what_completed(
    fake_server: FakeServer, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": []}\n'
    trace.write_text(good * 2 + '{"timestamp": 1}\n')
    args = ["bench", "--endpoint", fake_server.url, "--trace", str(trace), "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["metrics"]["num_completed"] == 2
    assert "t.jsonl:3" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_flag_errors_exit_2_in_one_line(tmp_path: Path) -> None:
    cases = [
        ["--workload", "fixed:in=8"],
        ["--workload", "fixed:in=8,out=1", "--time-scale", "2"],
        ["--trace", str(tmp_path / "missing.jsonl")],
        ["--workload", "fixed:in=8,out=1", "--goodput", "ttft=5"],
        ["--workload", "fixed:in=8,out=1", "--trace", "x"],
    ]
    for extra in cases:
        result = runner.invoke(app, ["bench", "--endpoint", "http://127.0.0.1:9", *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert result.stderr.startswith("prfaas: error: ")
        assert len(result.stderr.strip().splitlines()) == 1


def test_bad_endpoint_url_is_one_line() -> None:
    args = ["bench", "--endpoint", "ftp://nowhere", "--workload", "fixed:in=8,out=1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "bad endpoint 'ftp://nowhere'" in result.stderr
