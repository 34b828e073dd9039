"""The prefill timing an instance publishes, and the `PerfProfile` the live router builds from it.

The scheduler uses a profile for two estimates only: prefill seconds of an uncached length
(load counted at dispatch, the surge and congestion gates) and KV bytes of a context (link
lag). Each instance publishes a `PrefillTiming` table in its `/info` (`InstanceInfo.timing`):

    emulated   the catalog PerfProfile of its model and chip x `emulation.time_factor`,
               KV bytes x `emulation.byte_factor` (what its prefill really sleeps and ships)
    torch      a linear model (`DEFAULT_PREFILL_S_PER_TOKEN`, the tiny presets on one CPU
               core, order of magnitude) and the engine's KV bytes per token

The router builds one `LiveProfile` per cluster from a prefill instance of that cluster, so
PrfaaS (h200) and PD (h20) estimates differ as the chips do. Lengths are sampled four per
octave up to the context limit; between samples the table is interpolated linearly (prefill
time is convex in length, so the estimate is a little high between points: < 1% for
prfaas-1t), beyond the last sample it is extrapolated from the last two.
`model` and `chip`, which only the planner reads, are not available live and raise.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from prfaas.serve import protocol as p
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec

#: Prefill seconds per uncached token of the tiny presets on one CPU core (order of magnitude).
DEFAULT_PREFILL_S_PER_TOKEN = 2e-4
DEFAULT_PREFILL_OVERHEAD_S = 0.01
SAMPLES_PER_OCTAVE = 4


def sample_lengths(max_tokens: int) -> tuple[int, ...]:
    """1, then four lengths per octave (rounded), up to and including `max_tokens`."""
    lengths = {1, max(1, max_tokens)}
    k = 0
    while (n := round(2 ** (k / SAMPLES_PER_OCTAVE))) < max_tokens:
        lengths.add(n)
        k += 1
    return tuple(sorted(lengths))


@dataclass(frozen=True, slots=True)
class PrefillTiming:
    """Prefill seconds and KV bytes at sampled lengths (as an instance's wall clock sees them):
    one prompt's latency, and how many prompts the instance prefills at once (an attention-DP
    instance: one per rank; `PerfProfile.prefill_concurrency`)."""

    source: str
    lengths_tokens: tuple[int, ...]
    prefill_s: tuple[float, ...]
    cache_bytes: tuple[float, ...]
    concurrency: int = 1

    def __post_init__(self) -> None:
        n = len(self.lengths_tokens)
        if n < 2 or len(self.prefill_s) != n or len(self.cache_bytes) != n:
            raise ValueError("a timing table needs >= 2 points and equal-length columns")
        if any(b <= a for a, b in zip(self.lengths_tokens, self.lengths_tokens[1:], strict=False)):
            raise ValueError("timing lengths must increase")

    @classmethod
    def sampled(
        cls,
        source: str,
        max_tokens: int,
        prefill_s: Callable[[int], float],
        cache_bytes: Callable[[int], float],
        concurrency: int = 1,
    ) -> PrefillTiming:
        lengths = sample_lengths(max(2, max_tokens))
        return cls(
            source,
            lengths,
            tuple(prefill_s(n) for n in lengths),
            tuple(cache_bytes(n) for n in lengths),
            concurrency,
        )

    @classmethod
    def linear(cls, kv_bytes_per_token: float, max_tokens: int) -> PrefillTiming:
        """The torch backend's estimate: overhead + slope x tokens, KV linear in tokens."""
        return cls.sampled(
            "linear: tiny presets on one CPU core",
            max_tokens,
            lambda n: DEFAULT_PREFILL_OVERHEAD_S + DEFAULT_PREFILL_S_PER_TOKEN * n,
            lambda n: kv_bytes_per_token * n,
        )

    def at(self, column: tuple[float, ...], length_tokens: int) -> float:
        """`column` interpolated at `length_tokens` (linear; extrapolated past the ends)."""
        xs = self.lengths_tokens
        i = min(max(bisect.bisect_left(xs, length_tokens), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], column[i - 1], column[i]
        return max(0.0, y0 + (y1 - y0) * (length_tokens - x0) / (x1 - x0))


@dataclass(frozen=True, slots=True)
class LiveProfile:
    """A `PerfProfile` over one published `PrefillTiming` (the live router's scheduler uses it)."""

    timing: PrefillTiming
    decode_step_s_fixed: float = 0.01
    max_batch_size: int | None = None  # the decode batch cap (the planner's BS_max), if any

    @property
    def model(self) -> ModelSpec:
        raise NotImplementedError("the live router has no ModelSpec (planner only)")

    @property
    def chip(self) -> ChipSpec:
        raise NotImplementedError("the live router has no ChipSpec (planner only)")

    @property
    def gpus_per_instance(self) -> int:
        return 1

    @property
    def source(self) -> str:
        return f"live: published by the instances ({self.timing.source})"

    @property
    def prefill_concurrency(self) -> int:
        return self.timing.concurrency

    def prefill_s(self, length_tokens: int) -> float:
        return self.timing.at(self.timing.prefill_s, length_tokens)

    def cache_bytes(self, length_tokens: int) -> float:
        return self.timing.at(self.timing.cache_bytes, length_tokens)

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """A nominal step time; infinite past the instances' `max_batch_size` (they cannot
        batch more), so the planner's BS_max is that cap."""
        if self.max_batch_size is not None and batch_size > self.max_batch_size:
            return float("inf")
        return self.decode_step_s_fixed


def published_profile(timing: p.TimingBody | None, info: p.InstanceInfo) -> LiveProfile:
    """The scheduler's profile from a published timing (the linear default when none is):
    the router's cluster profiles (`serve.router.live_scheduler`) and each instance's own,
    which weighs a hit on its disk (`serve.router.registry.Registry.hit_tokens`)."""
    if timing is None:
        return LiveProfile(PrefillTiming.linear(info.kv_bytes_per_token, info.max_context_tokens))
    return LiveProfile(
        PrefillTiming(
            timing.source,
            tuple(timing.lengths_tokens),
            tuple(timing.prefill_s),
            tuple(timing.cache_bytes),
            timing.prefill_concurrency,
        )
    )
