"""Metric definitions, checked on requests timed by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.metrics import Distribution, RequestRecord, Slo, summarize
from prfaas.metrics.records import gap_runs


def record(
    rid: str, arrival: float, times: tuple[float, ...], path: str | None = None
) -> RequestRecord:
    return RequestRecord.from_token_times(rid, arrival, 100, times, path=path)


def test_per_request_definitions() -> None:
    r = record("a", 1.0, (1.5, 1.6, 1.8, 2.1))
    assert r.ttft_s == pytest.approx(0.5)
    assert r.e2e_s == pytest.approx(1.1)
    assert r.tpot_s == pytest.approx(0.6 / 3)
    assert [g for g, _ in r.gaps] == pytest.approx([0.1, 0.2, 0.3])
    assert r.output_tokens == 4


def test_equal_gaps_are_run_length_encoded() -> None:
    assert gap_runs([0.0, 1.0, 2.0, 3.0, 3.0, 5.0]) == ((1.0, 3), (0.0, 1), (2.0, 1))
    r = RequestRecord("a", 0.0, 10, first_token_s=1.0, gaps=((0.025, 999),))
    assert r.output_tokens == 1000
    assert r.e2e_s == pytest.approx(1.0 + 0.025 * 999)
    assert r.tpot_s == pytest.approx(0.025)


def test_single_token_request_has_no_tpot() -> None:
    r = record("a", 0.0, (0.3,))
    assert r.tpot_s is None and r.gaps == ()


def test_summary_counts_failures_and_goodput() -> None:
    records = [
        record("fast", 0.0, (0.5, 0.6, 0.7), path="pd-p"),
        record("slow-first", 1.0, (4.0, 4.1), path="prfaas"),
        record("slow-tokens", 2.0, (2.2, 3.2), path="prfaas"),
        RequestRecord("lost", 3.0, input_tokens=50, error="link cut"),
    ]
    summary = summarize(records, Slo(ttft_s=1.0, tpot_s=0.5), duration_s=10.0)
    assert (summary.num_requests, summary.num_completed, summary.num_failed) == (4, 3, 1)
    assert summary.failures == {"link cut": 1}
    assert summary.goodput_per_s == pytest.approx(0.1)  # only "fast" met both SLOs
    assert summary.request_throughput_per_s == pytest.approx(0.3)
    assert summary.output_token_throughput_per_s == pytest.approx(0.7)
    assert summary.input_token_throughput_per_s == pytest.approx(30.0)
    assert summary.paths == {"pd-p": 1, "prfaas": 2}
    assert summary.ttft_s.mean == pytest.approx((0.5 + 3.0 + 0.2) / 3)
    assert summary.itl_s.count == 4


def test_default_duration_spans_first_arrival_to_last_token() -> None:
    summary = summarize([record("a", 2.0, (3.0,)), record("b", 4.0, (6.0,))])
    assert summary.duration_s == pytest.approx(4.0)
    assert summary.goodput_per_s is None


def test_json_names_the_schema() -> None:
    payload = summarize([record("a", 0.0, (1.0, 2.0))]).to_json()
    assert payload["schema"] == "prfaas.metrics/1"
    assert payload["ttft_s"]["mean"] == 1.0


def test_token_times_must_not_go_backwards() -> None:
    with pytest.raises(ValueError, match="backwards"):
        record("a", 0.0, (1.0, 0.5))
    with pytest.raises(ValueError, match="before arrival"):
        record("a", 2.0, (1.0,))


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_distribution_is_ordered(values: list[float]) -> None:
    d = Distribution.of(values)
    assert d.count == len(values)
    assert min(values) <= d.median <= d.p90 <= d.p99 <= max(values)  # type: ignore[operator]
    assert min(values) - 1e-6 <= d.mean <= max(values) + 1e-6  # type: ignore[operator]


@given(
    st.lists(
        st.tuples(st.integers(0, 1000).map(lambda x: x / 8), st.integers(1, 50)),
        min_size=1,
        max_size=40,
    )
)
def test_weighted_distribution_equals_the_expanded_one(runs: list[tuple[float, int]]) -> None:
    values, counts = [v for v, _ in runs], [n for _, n in runs]
    expanded = np.repeat(values, counts)
    d = Distribution.weighted(values, counts)
    assert d.count == len(expanded)
    assert d.mean == pytest.approx(float(expanded.mean()))
    for ours, q in ((d.median, 50), (d.p90, 90), (d.p99, 99)):
        assert ours == float(np.percentile(expanded, q, method="inverted_cdf"))


def test_steady_throughput_skips_warm_up_and_drain() -> None:
    from prfaas.metrics import steady_throughput

    # 20 requests offered; completions at t = 1, 2, ..., 12, then a drain after the last
    # arrival at t = 10.5 (t = 11, 12 are outside the window).
    done = [record(f"r{i}", 0.0, (float(i),)) for i in range(1, 13)]
    failed = [RequestRecord(f"f{i}", 10.5, 10, error="cut off") for i in range(8)]
    steady = steady_throughput([*done, *failed], end_s=10.5, warmup_fraction=0.1)
    assert steady is not None
    # warm-up = ceil(0.1 x 20) = 2 completions: the window opens at t = 2
    assert (steady.start_s, steady.end_s, steady.num_completed) == (2.0, 10.5, 8)
    assert steady.request_throughput_per_s == pytest.approx(8 / 8.5)


def test_steady_throughput_needs_completions_inside_the_window() -> None:
    from prfaas.metrics import steady_throughput

    assert steady_throughput([record("a", 0.0, (5.0,))], end_s=4.0) is None
    assert steady_throughput([], end_s=1.0) is None
