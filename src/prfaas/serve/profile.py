"""A `PerfProfile` for the live router, so `SchedulerConfig` can be built without a chip catalog.

The scheduler uses a profile for two estimates only: prefill seconds of an uncached length
(load counted at dispatch, the congestion gate) and KV bytes of a context (link lag). The live
router knows the KV bytes per token from the instances (`InstanceInfo.kv_bytes_per_token`) and
uses a linear prefill-time model whose slope is a deployment setting; `model` and `chip`, which
only the planner reads, are not available live and raise.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec

#: Prefill seconds per uncached token of the tiny presets on one CPU core (order of magnitude).
DEFAULT_PREFILL_S_PER_TOKEN = 2e-4


@dataclass(frozen=True, slots=True)
class LiveProfile:
    kv_bytes_per_token: float
    prefill_s_per_token: float = DEFAULT_PREFILL_S_PER_TOKEN
    prefill_overhead_s: float = 0.01
    decode_step_s_fixed: float = 0.01

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
        return "live: linear prefill model, KV bytes from the instances"

    def prefill_s(self, length_tokens: int) -> float:
        return self.prefill_overhead_s + self.prefill_s_per_token * length_tokens

    def cache_bytes(self, length_tokens: int) -> float:
        return self.kv_bytes_per_token * length_tokens

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return self.decode_step_s_fixed
