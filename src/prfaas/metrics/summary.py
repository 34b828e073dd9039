"""Summaries of many requests: distributions, throughput and goodput, as one JSON schema."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from prfaas.metrics.records import RequestRecord
from prfaas.metrics.schema import SCHEMA_ID


@dataclass(frozen=True, slots=True)
class Distribution:
    """Mean and the percentiles the field reports; all None for an empty sample."""

    count: int
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        return cls.weighted(values, [1] * len(values))

    @classmethod
    def weighted(cls, values: Sequence[float], counts: Sequence[int]) -> Distribution:
        """The distribution of `values`, each repeated `counts` times, without expanding them.

        Percentiles are the inverted-CDF kind (the smallest value whose cumulative share
        reaches q), identical to np.percentile(..., method="inverted_cdf") on the expanded data.
        """
        weights = np.asarray(counts, dtype=np.float64)
        total = float(weights.sum())
        if total == 0:
            return cls(0, None, None, None, None)
        data = np.asarray(values, dtype=np.float64)
        order = np.argsort(data, kind="stable")
        data, cumulative = data[order], np.cumsum(weights[order])
        p50, p90, p99 = (
            float(data[np.searchsorted(cumulative, q * total, side="left")])
            for q in (0.5, 0.9, 0.99)
        )
        return cls(int(total), float(data @ weights[order] / total), p50, p90, p99)


@dataclass(frozen=True, slots=True)
class Slo:
    """Service-level objectives for goodput; None means no limit on that metric."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    def is_met_by(self, record: RequestRecord) -> bool:
        if not record.is_completed:
            return False
        ttft, tpot = record.ttft_s, record.tpot_s
        if self.ttft_s is not None and (ttft is None or ttft > self.ttft_s):
            return False
        return self.tpot_s is None or tpot is None or tpot <= self.tpot_s


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    """What `prfaas simulate` and `prfaas bench` both print (`to_json`)."""

    num_requests: int
    num_completed: int
    num_failed: int
    failures: dict[str, int]
    num_rejected: int  # refused by admission control (429), not counted in num_failed
    rejections: dict[str, int]
    duration_s: float
    request_throughput_per_s: float
    input_token_throughput_per_s: float
    output_token_throughput_per_s: float
    goodput_per_s: float | None
    slo: Slo | None
    ttft_s: Distribution
    tpot_s: Distribution
    itl_s: Distribution
    e2e_s: Distribution
    paths: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_ID, **asdict(self)}


def summarize(
    records: Iterable[RequestRecord], slo: Slo | None = None, duration_s: float | None = None
) -> MetricsSummary:
    """Summarise records. The duration defaults to first arrival -> last token seen, the one
    definition both `prfaas simulate` and `prfaas bench` report (rates are per that second)."""
    records = list(records)
    done = [r for r in records if r.is_completed]
    failed = [r for r in records if not r.is_completed and not r.is_rejected]
    rejected = [r for r in records if r.is_rejected]
    if duration_s is None:
        ends = [r.last_token_s for r in done if r.last_token_s is not None]
        start = min((r.arrival_s for r in records), default=0.0)
        duration_s = max(ends, default=start) - start
    rate = 1.0 / duration_s if duration_s > 0 else 0.0
    return MetricsSummary(
        num_requests=len(records),
        num_completed=len(done),
        num_failed=len(failed),
        failures=dict(Counter(r.error or "no tokens" for r in failed)),
        num_rejected=len(rejected),
        rejections=dict(Counter(r.error or "rejected" for r in rejected)),
        duration_s=duration_s,
        request_throughput_per_s=len(done) * rate,
        input_token_throughput_per_s=sum(r.input_tokens for r in done) * rate,
        output_token_throughput_per_s=sum(r.output_tokens for r in done) * rate,
        goodput_per_s=None if slo is None else sum(slo.is_met_by(r) for r in done) * rate,
        slo=slo,
        ttft_s=Distribution.of([r.ttft_s for r in done if r.ttft_s is not None]),
        tpot_s=Distribution.of([r.tpot_s for r in done if r.tpot_s is not None]),
        itl_s=Distribution.weighted(
            [gap for r in done for gap, _ in r.gaps], [n for r in done for _, n in r.gaps]
        ),
        e2e_s=Distribution.of([r.e2e_s for r in done if r.e2e_s is not None]),
        paths=dict(Counter(r.path for r in done if r.path is not None)),
    )


@dataclass(frozen=True, slots=True)
class SteadyThroughput:
    """Completions per second over a steady window `[start_s, end_s]` (same clock as the
    records); `num_completed` is how many requests finished inside it."""

    start_s: float
    end_s: float
    num_completed: int
    request_throughput_per_s: float


def steady_throughput(
    records: Iterable[RequestRecord], end_s: float, warmup_fraction: float = 0.1
) -> SteadyThroughput | None:
    """Throughput at saturation: completions per second between the end of the warm-up and
    `end_s`, the time the offered load stops (the last arrival).

    The window opens at the last token of the ceil(warmup_fraction x N)-th completion (N =
    requests offered), so the pipeline has filled; it closes at `end_s`, so the drain after
    the last arrival (queues emptying, stages going idle one by one) is left out. While the
    offered load exceeds capacity the queues never empty inside the window, so the rate is
    the deployment's capacity. None when the window is empty (too few completions before
    `end_s`: the load was not above capacity for long enough).
    """
    records = list(records)
    ends = sorted(r.last_token_s for r in records if r.is_completed and r.last_token_s is not None)
    skip = max(1, math.ceil(warmup_fraction * len(records)))
    if len(ends) < skip:
        return None
    start_s = ends[skip - 1]
    inside = sum(1 for t in ends if start_s < t <= end_s)
    if end_s <= start_s or inside == 0:
        return None
    return SteadyThroughput(start_s, end_s, inside, inside / (end_s - start_s))
