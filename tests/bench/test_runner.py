"""The runner against a third-party-style endpoint: counts, tokens, reasons, early stops."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from bench_fake_server import MODEL, FakeServer

from prfaas.bench import Arrival, BenchConfig, parse_workload_spec, run_bench, synthetic_arrivals
from prfaas.bench.arrivals import trace_arrivals
from prfaas.bench.runner import GIVE_UP_AFTER_FAILURES
from prfaas.metrics import MetricsSummary, Slo


def _synthetic(num: int, spec: str = "fixed:in=64,out=8") -> list[Arrival]:
    return synthetic_arrivals(parse_workload_spec(spec), num, math.inf, 1.0, 0)


def test_streams_every_request_and_counts_tokens(fake_server: FakeServer) -> None:
    fake_server.options.tokens_per_event = 3  # the client pads bundled tokens from usage
    config = BenchConfig(fake_server.url + "/v1", max_concurrency=4)
    result = asyncio.run(run_bench(config, _synthetic(12)))
    summary = result.summary(Slo(ttft_s=60.0))
    assert (result.model, result.stopped) == (MODEL, None)
    assert (summary.num_completed, summary.num_failed) == (12, 0)
    assert all(r.output_tokens == 8 and r.input_tokens == 64 for r in result.records)
    assert summary.itl_s.count == 12 * 7 and summary.tpot_s.count == 12
    assert summary.goodput_per_s == summary.request_throughput_per_s
    body = fake_server.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["max_tokens"], len(body["prompt"])) == (MODEL, 8, 64)


def test_report_is_the_simulator_schema(fake_server: FakeServer) -> None:
    result = asyncio.run(run_bench(BenchConfig(fake_server.url), _synthetic(2)))
    report = result.to_json(None, "two requests")
    assert report["schema"] == "prfaas.bench/1"
    metrics = report["metrics"]
    assert metrics["schema"] == "prfaas.metrics/1"
    assert set(metrics) == {"schema", *MetricsSummary.__dataclass_fields__}


def test_failures_are_counted_with_reasons(fake_server: FakeServer) -> None:
    fake_server.options.fail_every = 4
    fake_server.options.error_event_every = 5
    result = asyncio.run(run_bench(BenchConfig(fake_server.url, max_concurrency=1), _synthetic(20)))
    summary = result.summary(None)
    assert result.stopped is None
    assert summary.failures == {"http 503 (overloaded)": 5, "stream error (engine_failed)": 3}
    assert summary.num_completed == 12


def test_429s_are_rejections_not_failures(fake_server: FakeServer) -> None:
    fake_server.options.fail_every = 4
    fake_server.options.reject_every = 3
    result = asyncio.run(run_bench(BenchConfig(fake_server.url, max_concurrency=1), _synthetic(12)))
    summary = result.summary(None)
    # Requests 4, 8, 12 fail (503 first); 3, 6, 9 are refused with 429.
    assert summary.failures == {"http 503 (overloaded)": 3}
    assert summary.rejections == {"http 429 (rate_limit_exceeded)": 3}
    assert (summary.num_completed, summary.num_failed, summary.num_rejected) == (6, 3, 3)


def test_trace_replay_keeps_the_shared_prefix(fake_server: FakeServer, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1100, "output_length": 2, "hash_ids": [0, 1, 2]}\n'
        '{"timestamp": 10, "input_length": 1200, "output_length": 3, "hash_ids": [0, 1, 5]}\n'
    )
    result = asyncio.run(
        run_bench(BenchConfig(fake_server.url, max_concurrency=1), trace_arrivals(trace, 1, None))
    )
    assert [r.output_tokens for r in result.records] == [2, 3]
    first, second = (b["prompt"] for b in fake_server.bodies)
    assert (len(first), len(second)) == (1100, 1200)
    assert first[:1024] == second[:1024] and first[1024:] != second[1024:1100]


def test_malformed_trace_line_stops_with_a_partial_result(
    fake_server: FakeServer, tmp_path: Path
) -> None:
    trace = tmp_path / "t.jsonl"
    good = '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": []}\n'
    trace.write_text(good * 3 + "{not json\n" + good)
    result = asyncio.run(run_bench(BenchConfig(fake_server.url), trace_arrivals(trace, 1, None)))
    assert result.summary(None).num_completed == 3
    assert result.stopped is not None and "t.jsonl:4: not valid JSON" in result.stopped


def test_unreachable_server_stops_before_sending(closed_port_url: str) -> None:
    result = asyncio.run(run_bench(BenchConfig(closed_port_url), _synthetic(5)))
    assert result.records == ()
    assert result.stopped is not None and result.stopped.startswith("cannot connect to")


def test_unreachable_server_with_a_model_stops_at_the_first_failure(closed_port_url: str) -> None:
    config = BenchConfig(closed_port_url, model="m", max_concurrency=1)
    result = asyncio.run(run_bench(config, _synthetic(50)))
    assert result.summary(None).failures == {"cannot connect": 1}
    assert result.stopped is not None and "unreachable" in result.stopped


def test_not_an_openai_endpoint(fake_server: FakeServer) -> None:
    fake_server.options.not_found = True
    result = asyncio.run(run_bench(BenchConfig(fake_server.url), _synthetic(5)))
    assert result.stopped is not None and "answered HTTP 404" in result.stopped
    config = BenchConfig(fake_server.url, model="m", max_concurrency=1)
    result = asyncio.run(run_bench(config, _synthetic(100)))
    assert result.summary(None).failures == {"http 404 (nope)": GIVE_UP_AFTER_FAILURES}
    assert result.stopped is not None and "all failed (http 404 (nope))" in result.stopped
