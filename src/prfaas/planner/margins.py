"""Fixed planning margins: a planner option (`prfaas plan --margins aic`), never the default.

prfaas plans without margins: its plan is the paper's Eq. 3-6 on the timing source, and the
simulator measures what margins stand for (prefill bubbles, decode slots not full, queueing).
aiconfigurator plans with four fixed factors; `--margins aic` applies them so the two planners
can be compared on the same rules (issue 30, docs/planner.md):

    prefill latency  x 1.1    T_prefill on every prefill instance (rate and TTFT)
    decode latency   x 1.08   the decode step: BS_max is the largest batch whose corrected
                              step meets the TPOT SLO, and T_decode is that corrected step
    prefill rate     x 0.9    Theta_prfaas's compute bound and Theta_pdp (Eq. 3-4)
    decode rate      x 0.92   Theta_pdd (Eq. 5)

(aiconfigurator 0.12.0's defaults, read from its installed package at run time by
`specs.aic.aic_factors`, not copied here). The link's bound on Theta_prfaas is a byte rate, not
a worker's, and takes no factor. Callers: `planner.model.StageModel` and the parallelism
search (`planner.parallel`) read `Hardware.margins`; the CLI builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.specs.aic import aic_factors
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec
from prfaas.specs.perf import PerfProfile


@dataclass(frozen=True, slots=True)
class Margins:
    """Latency corrections (multiply a time) and rate factors (multiply a throughput)."""

    prefill_latency: float
    decode_latency: float
    prefill_rate: float
    decode_rate: float
    source: str

    def describe(self) -> str:
        return (
            f"margins: {self.source}: prefill latency x{self.prefill_latency:g}, decode "
            f"latency x{self.decode_latency:g}, prefill rate x{self.prefill_rate:g}, "
            f"decode rate x{self.decode_rate:g}"
        )

    def corrected(self, profile: PerfProfile) -> PerfProfile:
        """`profile` with its prefill and decode times multiplied by the corrections."""
        return CorrectedProfile(profile, self.prefill_latency, self.decode_latency)


def aic_margins() -> Margins | str:
    """aiconfigurator's four factors from its installed package, or why they cannot be read."""
    factors = aic_factors()
    if isinstance(factors, str):
        return factors
    return Margins(
        prefill_latency=factors.prefill_latency_correction,
        decode_latency=factors.decode_latency_correction,
        prefill_rate=factors.prefill_rate_matching,
        decode_rate=factors.decode_rate_matching,
        source=f"aiconfigurator {factors.version}'s",
    )


@dataclass(frozen=True, slots=True)
class CorrectedProfile:
    """A profile whose prefill and decode step times are multiplied by fixed corrections."""

    inner: PerfProfile
    prefill_factor: float
    decode_factor: float

    @property
    def model(self) -> ModelSpec:
        return self.inner.model

    @property
    def chip(self) -> ChipSpec:
        return self.inner.chip

    @property
    def gpus_per_instance(self) -> int:
        return self.inner.gpus_per_instance

    @property
    def source(self) -> str:
        return (
            f"{self.inner.source}, corrected x{self.prefill_factor:g} prefill / "
            f"x{self.decode_factor:g} decode"
        )

    @property
    def prefill_concurrency(self) -> int:
        return self.inner.prefill_concurrency

    def prefill_s(self, length_tokens: int) -> float:
        return self.inner.prefill_s(length_tokens) * self.prefill_factor

    def cache_bytes(self, length_tokens: int) -> float:
        return self.inner.cache_bytes(length_tokens)

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return self.inner.decode_step_s(batch_size, context_tokens) * self.decode_factor
