"""Run options: `--duration` ends a run on time (in-flight requests cut off), `--records` keeps
every request's timeline (the report's duration is `prfaas.metrics`': first arrival -> last
token), `--api chat` streams `/v1/chat/completions`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from bench_fake_server import FakeServer
from typer.testing import CliRunner

from prfaas.bench import Arrival, BenchConfig, run_bench
from prfaas.bench.runner import CUT_OFF
from prfaas.cli.app import app, main

runner = CliRunner()


def test_duration_cuts_off_what_is_in_flight_and_sends_nothing_later(
    fake_server: FakeServer,
) -> None:
    fake_server.options.token_delay_s = 0.05  # 400 tokens: a 20 s stream
    arrivals = [
        Arrival("a", 0.0, 16, 400),
        Arrival("b", 0.0, 16, 400),
        Arrival("late", 30.0, 16, 4),  # scheduled after the end: never sent
    ]
    config = BenchConfig(fake_server.url, duration_s=0.5)
    result = asyncio.run(run_bench(config, arrivals))
    assert result.stopped is None
    assert sorted(r.request_id for r in result.records) == ["a", "b"]
    assert all(r.error == CUT_OFF for r in result.records)
    assert len(fake_server.bodies) == 2


def test_records_file_and_metrics_duration(fake_server: FakeServer, tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=8,out=3"]
    args += ["--num-requests", "4", "--rate", "50", "--json", "--records", str(records)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(rows) == 4 and all(r["error"] is None and r["output_tokens"] == 3 for r in rows)
    first = min(r["arrival_s"] for r in rows)
    last = max(r["last_token_s"] for r in rows)
    assert report["metrics"]["duration_s"] == last - first  # the simulator's definition
    assert report["wall_s"] >= report["metrics"]["duration_s"]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_bad_duration_is_a_flag_error(
    fake_server: FakeServer, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=8,out=3"]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--duration", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("prfaas: error: Invalid value for '--duration'")
    assert len(err.splitlines()) == 1


def test_chat_api_streams_deltas(fake_server: FakeServer) -> None:
    args = ["bench", "--endpoint", fake_server.url, "--workload", "fixed:in=20,out=5"]
    result = runner.invoke(app, [*args, "--num-requests", "3", "--api", "chat", "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)["metrics"]
    assert (metrics["num_completed"], metrics["tpot_s"]["count"]) == (3, 3)
    body = fake_server.bodies[0]
    assert body["messages"] == [{"role": "user", "content": body["messages"][0]["content"]}]
    assert len(body["messages"][0]["content"]) == 20 and body["max_completion_tokens"] == 5
