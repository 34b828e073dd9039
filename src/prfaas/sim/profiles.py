"""Memoised timing profiles: the simulator asks the same lengths over and over.

`MemoProfile` wraps a `PerfProfile` and remembers every `prefill_s`, `cache_bytes` and
`decode_step_s` answer by its exact integer arguments, so results are bit-identical to the
wrapped profile (no grid, no interpolation of ours) while a trace of 12K requests pays each
distinct length once. `model`, `chip` and the rest read through to the wrapped profile.
Pure and per-run: one wrapper per simulation, no global cache.
"""

from __future__ import annotations

from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec
from prfaas.specs.perf import PerfProfile


class MemoProfile:
    def __init__(self, profile: PerfProfile) -> None:
        self.profile = profile
        self._prefill: dict[int, float] = {}
        self._bytes: dict[int, float] = {}
        self._step: dict[tuple[int, int], float] = {}

    @property
    def model(self) -> ModelSpec:
        return self.profile.model

    @property
    def chip(self) -> ChipSpec:
        return self.profile.chip

    @property
    def gpus_per_instance(self) -> int:
        return self.profile.gpus_per_instance

    @property
    def source(self) -> str:
        return self.profile.source

    @property
    def prefill_concurrency(self) -> int:
        return self.profile.prefill_concurrency

    def prefill_s(self, length_tokens: int) -> float:
        value = self._prefill.get(length_tokens)
        if value is None:
            value = self._prefill[length_tokens] = self.profile.prefill_s(length_tokens)
        return value

    def cache_bytes(self, length_tokens: int) -> float:
        value = self._bytes.get(length_tokens)
        if value is None:
            value = self._bytes[length_tokens] = self.profile.cache_bytes(length_tokens)
        return value

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        key = (batch_size, context_tokens)
        value = self._step.get(key)
        if value is None:
            value = self._step[key] = self.profile.decode_step_s(batch_size, context_tokens)
        return value
