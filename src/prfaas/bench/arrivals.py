"""What the benchmark sends and when: a Mooncake trace replayed by timestamp, or synthetic load.

    trace      one request a line, sent at (timestamp - first timestamp) x time_scale seconds
               (0.5 = twice the rate); lengths and hash ids as recorded; read lazily, so a
               malformed line stops the run there and the lines before it still count
    synthetic  input lengths from a `prfaas.workload` distribution, a fixed output length,
               gaps from a gamma process with mean 1 / rate and shape = burstiness (vLLM
               `bench serve`: 1 is Poisson, < 1 burstier, coefficient of variation 1/sqrt(B));
               rate inf sends everything at once (bounded by the client's concurrency)

Workload specs are one string, `kind:key=value,...`:

    lognormal:mu=9.9,sigma=1,min=128,max=131072,out=256   TruncatedLognormal (paper section 5)
    fixed:in=1024,out=256                                 FixedLength

Everything random comes from one seeded generator, so the same flags send the same requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from prfaas.bench.errors import BenchError, TraceLineError, WorkloadSpecError
from prfaas.workload.lengths import FixedLength, TruncatedLognormal
from prfaas.workload.trace import parse_trace_line


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request to send `at_s` seconds after the run starts."""

    request_id: str
    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    input_lengths: TruncatedLognormal | FixedLength
    output_tokens: int
    description: str


_KEYS = {"lognormal": ("mu", "sigma", "min", "max", "out"), "fixed": ("in", "out")}


def parse_workload_spec(spec: str) -> SyntheticSpec:
    """`kind:key=value,...` (module docstring) -> lengths; any problem is one line."""
    kind, _, rest = spec.partition(":")
    if kind not in _KEYS:
        raise WorkloadSpecError(f"--workload: unknown kind {kind!r} (use {', '.join(_KEYS)})")
    values: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or key not in _KEYS[kind]:
            raise WorkloadSpecError(
                f"--workload: bad item {item!r} for {kind} (keys: {', '.join(_KEYS[kind])})"
            )
        try:
            values[key] = float(raw)
        except ValueError:
            raise WorkloadSpecError(f"--workload: {key}={raw!r} is not a number") from None
    missing = [k for k in _KEYS[kind] if k not in values]
    if missing:
        raise WorkloadSpecError(f"--workload: {kind} needs {', '.join(missing)}")
    out = values["out"]
    if out < 1 or not out.is_integer():
        raise WorkloadSpecError("--workload: out must be a whole number of tokens >= 1")
    try:
        lengths: TruncatedLognormal | FixedLength = (
            FixedLength(_whole(values["in"], "in"))
            if kind == "fixed"
            else TruncatedLognormal(values["mu"], values["sigma"], values["min"], values["max"])
        )
    except ValueError as err:
        raise WorkloadSpecError(f"--workload: {err}") from None
    return SyntheticSpec(lengths, int(out), spec)


def _whole(value: float, key: str) -> int:
    if not value.is_integer():
        raise WorkloadSpecError(f"--workload: {key} must be a whole number of tokens")
    return int(value)


def sample_input_tokens(
    lengths: TruncatedLognormal | FixedLength, num: int, rng: np.random.Generator
) -> list[int]:
    """`num` draws; the lognormal by inverting its CDF between the bounds (no rejection loop)."""
    if isinstance(lengths, FixedLength):
        return [lengths.tokens] * num
    normal = NormalDist()
    low, high = (
        normal.cdf((math.log(x) - lengths.mu) / lengths.sigma)
        for x in (lengths.min_tokens, lengths.max_tokens)
    )
    draws = []
    for u in rng.uniform(low, high, num).tolist():
        z = normal.inv_cdf(min(max(u, 1e-300), 1.0 - 1e-16))
        tokens = round(math.exp(lengths.mu + lengths.sigma * z))
        draws.append(int(min(max(tokens, lengths.min_tokens), lengths.max_tokens)))
    return draws


def synthetic_arrivals(
    spec: SyntheticSpec, num: int, rate_per_s: float, burstiness: float, seed: int
) -> list[Arrival]:
    """`num` requests with gamma gaps (module docstring)."""
    if num < 1:
        raise WorkloadSpecError("--num-requests must be at least 1")
    if rate_per_s <= 0 or burstiness <= 0:
        raise WorkloadSpecError("--rate and --burstiness must be positive")
    rng = np.random.default_rng(seed)
    if math.isinf(rate_per_s):
        times = [0.0] * num
    else:
        gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), num)
        gaps[0] = 0.0
        times = np.cumsum(gaps).tolist()
    inputs = sample_input_tokens(spec.input_lengths, num, rng)
    return [
        Arrival(f"bench-{i}", t, n_in, spec.output_tokens)
        for i, (t, n_in) in enumerate(zip(times, inputs, strict=True))
    ]


def count_trace_requests(path: Path, limit: int | None) -> int:
    """Non-blank lines (capped at `limit`): the progress bar's total, before any parsing."""
    try:
        with path.open("rb") as handle:
            total = sum(1 for line in handle if line.strip())
    except OSError as err:
        raise BenchError(f"{path}: cannot read trace ({err.strerror})") from None
    return total if limit is None else min(total, limit)


def trace_arrivals(path: Path, time_scale: float, limit: int | None) -> Iterator[Arrival]:
    """The trace's requests in file order, parsed one line at a time (module docstring).

    A line whose timestamp is earlier than the one before it is sent at once (the replay
    never waits backwards); the trace's first timestamp is time zero.
    """
    if time_scale <= 0:
        raise WorkloadSpecError("--time-scale must be positive")
    first_ms: float | None = None
    sent = 0
    with path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if limit is not None and sent >= limit:
                return
            if not line.strip():
                continue
            try:
                request = parse_trace_line(line, f"{path}:{number}")
            except ValueError as err:
                raise TraceLineError(str(err)) from None
            first_ms = request.timestamp_ms if first_ms is None else first_ms
            yield Arrival(
                f"trace-{number}",
                max(0.0, request.timestamp_ms - first_ms) / 1000.0 * time_scale,
                request.input_tokens,
                max(1, request.output_tokens),
                request.hash_ids,
            )
            sent += 1
