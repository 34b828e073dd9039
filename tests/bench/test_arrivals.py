"""Arrivals: workload specs, synthetic gaps and lengths, lazy trace replay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from prfaas.bench import (
    TraceLineError,
    WorkloadSpecError,
    count_trace_requests,
    parse_workload_spec,
    synthetic_arrivals,
    trace_arrivals,
)
from prfaas.bench.arrivals import sample_input_tokens
from prfaas.workload import FixedLength, TruncatedLognormal


def test_parses_lognormal_and_fixed_specs() -> None:
    spec = parse_workload_spec("lognormal:mu=9.9,sigma=1,min=128,max=131072,out=256")
    assert spec.input_lengths == TruncatedLognormal(9.9, 1.0, 128, 131072)
    assert spec.output_tokens == 256
    assert parse_workload_spec("fixed:in=1024,out=8").input_lengths == FixedLength(1024)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("uniform:a=1", "unknown kind 'uniform'"),
        ("fixed:in=10,out=2,zz=1", "bad item 'zz=1'"),
        ("fixed:in=10", "fixed needs out"),
        ("fixed:in=ten,out=2", "in='ten' is not a number"),
        ("fixed:in=10.5,out=2", "in must be a whole number"),
        ("fixed:in=10,out=0", "out must be a whole number of tokens >= 1"),
        ("lognormal:mu=9,sigma=1,min=500,max=100,out=1", "min_tokens < max_tokens"),
    ],
)
def test_bad_specs_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(WorkloadSpecError, match=message) as err:
        parse_workload_spec(spec)
    assert "\n" not in str(err.value)


def test_lognormal_draws_stay_in_bounds_and_are_seeded() -> None:
    dist = TruncatedLognormal(9.9, 1.0, 128, 131072)
    draws = sample_input_tokens(dist, 2000, np.random.default_rng(1))
    assert all(128 <= d <= 131072 for d in draws)
    assert draws == sample_input_tokens(dist, 2000, np.random.default_rng(1))
    assert abs(np.mean(draws) / dist.mean_tokens - 1) < 0.1


def test_infinite_rate_sends_everything_at_once() -> None:
    spec = parse_workload_spec("fixed:in=10,out=2")
    arrivals = synthetic_arrivals(spec, 5, math.inf, 1.0, 0)
    assert [a.at_s for a in arrivals] == [0.0] * 5
    assert {a.request_id for a in arrivals} == {f"bench-{i}" for i in range(5)}


def test_finite_rate_gaps_are_ordered_and_reproducible() -> None:
    spec = parse_workload_spec("fixed:in=10,out=2")
    one = synthetic_arrivals(spec, 50, 10.0, 0.5, 7)
    times = [a.at_s for a in one]
    assert times == sorted(times) and times[0] == 0.0
    assert one == synthetic_arrivals(spec, 50, 10.0, 0.5, 7)
    with pytest.raises(WorkloadSpecError, match="positive"):
        synthetic_arrivals(spec, 5, 10.0, 0.0, 0)


def test_trace_replays_lazily_and_stops_at_a_bad_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    lines = [
        '{"timestamp": 1000, "input_length": 600, "output_length": 0, "hash_ids": [0, 1]}',
        "",
        '{"timestamp": 3000, "input_length": 100, "output_length": 4, "hash_ids": [0]}',
        '{"timestamp": 4000, "input_length": -3, "output_length": 4, "hash_ids": []}',
    ]
    trace.write_text("\n".join(lines) + "\n")
    assert count_trace_requests(trace, None) == 3
    arrivals = trace_arrivals(trace, 0.5, None)
    first, second = next(arrivals), next(arrivals)
    assert (first.at_s, first.output_tokens, first.hash_ids) == (0.0, 1, (0, 1))
    assert (second.request_id, second.at_s) == ("trace-3", 1.0)
    with pytest.raises(TraceLineError, match=r"t.jsonl:4: input_length"):
        next(arrivals)
    assert len(list(trace_arrivals(trace, 1.0, 1))) == 1
