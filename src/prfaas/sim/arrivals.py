"""Arrivals: the requests a run replays, from a trace or a synthetic process.

    trace    Mooncake timestamps, inter-arrival gaps multiplied by `time_scale` (0.5 = twice
             the rate), lengths and hash ids as recorded
    poisson  exponential gaps at `rate_per_s`
    uniform  equal gaps of 1 / rate_per_s (the paper's steady-state assumption)
    gamma    gamma gaps with mean 1 / rate_per_s and coefficient of variation `cv` (bursty
             when cv > 1)

Synthetic lengths are drawn from the scenario's input and output distributions; `shift`
multiplies input lengths of requests arriving at or after `at_s` (the traffic-shift experiment).
Everything is drawn from one seeded generator, so a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prfaas.kvcache.ids import RequestId
from prfaas.planner.scenario import ArrivalsFile, LengthsFile
from prfaas.specs.errors import SpecError
from prfaas.workload.trace import TraceRequest


@dataclass(frozen=True, slots=True)
class SimRequest:
    request_id: RequestId
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def sample_lengths(body: LengthsFile, num: int, rng: np.random.Generator) -> list[int]:
    """`num` draws from a scenario length section (lognormal by rejection, or fixed)."""
    if body.fixed_tokens is not None:
        return [body.fixed_tokens] * num
    ln = body.lognormal
    if ln is None:
        raise SpecError("workload lengths: give lognormal or fixed_tokens")
    out: list[int] = []
    while len(out) < num:
        draw = np.exp(ln.mu + ln.sigma * rng.standard_normal(2 * (num - len(out)) + 16))
        keep = draw[(draw >= ln.min_tokens) & (draw <= ln.max_tokens)]
        out.extend(round(float(x)) for x in keep[: num - len(out)])
    return out


def _gaps_s(body: ArrivalsFile, num: int, rng: np.random.Generator) -> list[float]:
    if body.rate_per_s is None:
        raise SpecError(f"arrivals: process {body.process} needs rate_per_s")
    mean = 1.0 / body.rate_per_s
    if body.process == "uniform":
        return [mean] * num
    if body.process == "poisson":
        gaps: list[float] = rng.exponential(mean, num).tolist()
        return gaps
    shape = 1.0 / body.cv**2
    gamma: list[float] = rng.gamma(shape, mean / shape, num).tolist()
    return gamma


def synthetic_arrivals(
    body: ArrivalsFile, inputs: LengthsFile, outputs: LengthsFile, seed: int
) -> list[SimRequest]:
    if body.num_requests is None:
        raise SpecError("arrivals: a synthetic process needs num_requests")
    rng = np.random.default_rng(seed)
    num = body.num_requests
    times = np.cumsum(_gaps_s(body, num, rng)).tolist()
    lengths_in = sample_lengths(inputs, num, rng)
    lengths_out = sample_lengths(outputs, num, rng)
    shift = body.shift
    return [
        SimRequest(
            RequestId(f"r{i}"),
            t,
            max(1, round(n_in * shift.input_scale)) if shift and t >= shift.at_s else n_in,
            max(1, n_out),
        )
        for i, (t, n_in, n_out) in enumerate(zip(times, lengths_in, lengths_out, strict=True))
    ]


def trace_arrivals(
    trace: Sequence[TraceRequest], time_scale: float, limit: int | None = None
) -> list[SimRequest]:
    chosen = trace[:limit] if limit is not None else trace
    start_ms = chosen[0].timestamp_ms if chosen else 0.0
    return [
        SimRequest(
            RequestId(f"r{i}"),
            (r.timestamp_ms - start_ms) / 1000.0 * time_scale,
            r.input_tokens,
            max(1, r.output_tokens),
            r.hash_ids,
        )
        for i, r in enumerate(chosen)
    ]
