"""A generated diurnal ramp in Mooncake trace format (issue 27: the slow loop's trace shapes).

Traffic that rises from a trough to a peak and back over one (compressed) day, with the
prompt mix shifting with it: at the peak, long-document requests (analysis, retrieval) take a
larger share than at the trough, so the throughput-optimal threshold moves during the run and a
slow loop has something to follow. The generator draws

- arrivals from a Poisson process thinned to the rate
  `peak_rate_per_s * (trough_fraction + (1 - trough_fraction) * (1 - cos(2 pi t / period_s)) / 2)`
  (trough at t = 0 and at `period_s`, peak at half the period);
- input lengths from a lognormal whose log-mean moves linearly with the load, from
  `trough_mu` to `peak_mu` (sigma `sigma`), clipped to [`min_tokens`, `max_tokens`];
- outputs lognormal around `mean_output_tokens`; no shared prefixes (`hash_ids` name each
  request's own blocks, so nothing is reused and the shape isolates the load and mix shift).

    trace = diurnal_trace(DiurnalSpec(seed=1))
    write_mooncake_trace(trace, Path("diurnal.jsonl"))      # workload.prefix_heavy's writer
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True, slots=True)
class DiurnalSpec:
    num_requests: int = 4000
    peak_rate_per_s: float = 6.0
    trough_fraction: float = 0.3
    period_s: float = 1800.0
    trough_mu: float = 8.6  # ~5.4K tokens median at the trough
    peak_mu: float = 9.6  # ~15K tokens median at the peak
    sigma: float = 1.0
    min_tokens: int = 128
    max_tokens: int = 131_072
    mean_output_tokens: float = 343.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_requests < 1 or self.peak_rate_per_s <= 0 or self.period_s <= 0:
            raise ValueError("need num_requests >= 1, peak_rate_per_s > 0 and period_s > 0")
        if not 0 < self.trough_fraction <= 1:
            raise ValueError("trough_fraction must be in (0, 1]")
        if not 1 <= self.min_tokens < self.max_tokens:
            raise ValueError("need 1 <= min_tokens < max_tokens")


def load_fraction(spec: DiurnalSpec, at_s: float) -> float:
    """The offered rate at `at_s` as a fraction of the peak (1 at half the period)."""
    swing = (1.0 - math.cos(2.0 * math.pi * at_s / spec.period_s)) / 2.0
    return spec.trough_fraction + (1.0 - spec.trough_fraction) * swing


def diurnal_trace(spec: DiurnalSpec) -> tuple[TraceRequest, ...]:
    """The ramp's requests in arrival order (timestamps in ms, as Mooncake writes them)."""
    rng = np.random.default_rng(spec.seed)
    requests: list[TraceRequest] = []
    at_s, next_block = 0.0, 0
    low = spec.trough_fraction
    while len(requests) < spec.num_requests:
        at_s += float(rng.exponential(1.0 / spec.peak_rate_per_s))
        load = load_fraction(spec, at_s)
        if rng.random() > load:
            continue  # thinned: the rate here is below the peak
        mu = spec.trough_mu + (spec.peak_mu - spec.trough_mu) * (load - low) / max(1 - low, 1e-9)
        length = round(float(rng.lognormal(mu, spec.sigma)))
        length = min(spec.max_tokens, max(spec.min_tokens, length))
        blocks = -(-length // MOONCAKE_BLOCK_TOKENS)
        output_mu = math.log(spec.mean_output_tokens) - 0.7**2 / 2
        requests.append(
            TraceRequest(
                timestamp_ms=round(at_s * 1000.0, 3),
                input_tokens=length,
                output_tokens=max(1, round(float(rng.lognormal(output_mu, 0.7)))),
                hash_ids=tuple(range(next_block, next_block + blocks)),
            )
        )
        next_block += blocks
    return tuple(requests)
