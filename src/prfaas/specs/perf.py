"""Timing of one instance (a model on `gpus_per_instance` chips): prefill latency T_prefill(l),
the cache it produces S_kv(l), and the time of one decode step.

Two sources, behind one `PerfProfile` protocol:

* `RooflineProfile`: from architecture alone. Prefill is compute bound at long lengths and
  overhead bound at short ones:

      T_prefill(l) = overhead_s + max(compute, weights / (gpus * HBM))
      compute      = matmul FLOPs(l) / (gpus * peak * mfu)
                   + mixing FLOPs(l) / (gpus * peak * attention_efficiency)

  with the chip's two fitted constants (mfu, overhead_s), the same for every model, and its
  published attention-kernel efficiency.
  A decode step of `batch` requests at context c is memory bound:

      T_step = overhead_s + max(bytes / (gpus * HBM * mbu), FLOPs / (gpus * peak * mfu))
      bytes  = dense weights + experts touched by the batch + batch * S_kv(c)

* `MeasuredProfile`: measured points (length, seconds[, bytes]), as in the paper's Table 5,
  interpolated by `MeasuredCurve`. Decode has no measurement in the paper, so it comes from the
  roofline of the same model and chip.

Measured beats modelled: a `MeasuredProfile` with byte measurements reports those as S_kv.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec, MoeMlp


class PerfProfile(Protocol):
    """What the planner, simulator and emulated engines need to know about an instance.

    `prefill_s(l)` is one request's prefill latency on an idle instance (its TTFT there), and
    the instance runs up to `prefill_concurrency` such prefills at once: an instance of dp
    attention-data-parallel ranks prefills one prompt per rank, the experts shared
    (`specs.aic`). Its prefill rate is therefore prefill_concurrency / prefill_s(l), which is
    what Eq. 3-4 read; the roofline and measured profiles prefill one request at a time
    (concurrency 1), so for them the latency and the rate are the same number, as in the paper.
    """

    @property
    def model(self) -> ModelSpec: ...

    @property
    def chip(self) -> ChipSpec: ...

    @property
    def gpus_per_instance(self) -> int: ...

    @property
    def source(self) -> str: ...

    @property
    def prefill_concurrency(self) -> int: ...

    def prefill_s(self, length_tokens: int) -> float: ...

    def cache_bytes(self, length_tokens: int) -> float: ...

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float: ...


def _experts_touched(moe: MoeMlp, batch_size: int) -> float:
    """Expected distinct experts that `batch_size` tokens route to, with uniform routing."""
    miss = (1.0 - moe.experts_per_token / moe.num_experts) ** batch_size
    return moe.num_experts * (1.0 - miss)


@dataclass(frozen=True, slots=True)
class RooflineProfile:
    model: ModelSpec
    chip: ChipSpec
    gpus_per_instance: int

    @property
    def source(self) -> str:
        return "roofline"

    @property
    def prefill_concurrency(self) -> int:
        return 1  # the roofline times the instance as one prefill at a time

    def _compute_s(self, matmul_flops: float, mixing_flops: float) -> float:
        cal = self.chip.calibration
        peak = self.gpus_per_instance * self.chip.dense_bf16_flops
        return matmul_flops / (peak * cal.prefill_mfu) + mixing_flops / (
            peak * cal.attention_efficiency
        )

    def _hbm_s(self, num_bytes: float, utilisation: float = 1.0) -> float:
        return num_bytes / (self.gpus_per_instance * self.chip.hbm_bytes_per_s * utilisation)

    def prefill_s(self, length_tokens: int) -> float:
        model = self.model
        compute = self._compute_s(
            model.matmul_flops(length_tokens), model.mixing_flops(length_tokens)
        )
        weights = self._hbm_s(self.model.weight_bytes())
        return self.chip.calibration.prefill_overhead_s + max(compute, weights)

    def cache_bytes(self, length_tokens: int) -> float:
        return float(self.model.cache_bytes(length_tokens))

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        model, cal = self.model, self.chip.calibration
        h = model.hidden_size
        # Embedding lookups read one row per token (negligible); the LM head is read whole.
        weights: float = h * model.vocab_size + sum(g.params(h) for g in model.mixers)
        for mlp in model.mlps:
            if isinstance(mlp, MoeMlp):
                per_expert = 3 * h * mlp.expert_intermediate_size
                touched = _experts_touched(mlp, batch_size)
                shared = mlp.params(h) - mlp.num_layers * mlp.num_experts * per_expert
                weights += shared + mlp.num_layers * touched * per_expert
            else:
                weights += mlp.params(h)
        read_bytes = weights * model.weight_dtype_bytes
        read_bytes += batch_size * model.cache_bytes(context_tokens)
        # One new token per request (with its logits): a one-token prefill's matmuls, and the
        # increment of the token-mixing FLOPs at context c.
        matmul = batch_size * model.matmul_flops(1)
        mixing = batch_size * (
            model.mixing_flops(context_tokens + 1) - model.mixing_flops(context_tokens)
        )
        memory = self._hbm_s(read_bytes, cal.decode_mbu)
        return cal.decode_overhead_s + max(memory, self._compute_s(matmul, mixing))


@dataclass(frozen=True, slots=True)
class MeasuredCurve:
    """A measured quantity versus length, exact at every measurement.

    Between neighbouring points it follows a power law (a straight line in log-log space):
    measurements are spaced geometrically (1K, 8K, 32K, 128K) and over one such step a prefill
    curve a + b*l + c*l^2 is close to a power law, while a chord in linear space overstates a
    convex curve. Outside the measured range it extends the end segments as straight lines in
    l, which keeps the fixed cost at short lengths and the linear growth at long ones.
    """

    lengths: tuple[float, ...]
    values: tuple[float, ...]

    @classmethod
    def fit(cls, lengths: Sequence[float], values: Sequence[float]) -> MeasuredCurve:
        if len(lengths) != len(values) or len(lengths) < 2:
            raise ValueError("need at least 2 measured points of (length, value)")
        if list(lengths) != sorted(lengths) or len(set(lengths)) != len(lengths):
            raise ValueError("measurement lengths must be strictly increasing")
        if min(lengths) <= 0 or min(values) <= 0:
            raise ValueError("measured lengths and values must be positive")
        return cls(tuple(float(x) for x in lengths), tuple(float(y) for y in values))

    def __call__(self, length: float) -> float:
        xs, ys = self.lengths, self.values
        if length < xs[0] or length > xs[-1]:
            i = 0 if length < xs[0] else -2
            slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
            anchor = 0 if length < xs[0] else -1
            return ys[anchor] + slope * (length - xs[anchor])
        return float(np.exp(np.interp(np.log(length), np.log(xs), np.log(ys))))


@dataclass(frozen=True, slots=True)
class MeasuredProfile:
    model: ModelSpec
    chip: ChipSpec
    gpus_per_instance: int
    prefill: MeasuredCurve
    cache: MeasuredCurve | None
    reference: str

    @property
    def source(self) -> str:
        return f"measured ({self.reference})"

    @property
    def prefill_concurrency(self) -> int:
        return 1  # the measured points are one prompt on the whole instance

    def prefill_s(self, length_tokens: int) -> float:
        return self.prefill(length_tokens)

    def cache_bytes(self, length_tokens: int) -> float:
        if self.cache is None:
            return float(self.model.cache_bytes(length_tokens))
        return self.cache(length_tokens)

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        roofline = RooflineProfile(self.model, self.chip, self.gpus_per_instance)
        return roofline.decode_step_s(batch_size, context_tokens)


def kv_throughput_gbps(profile: PerfProfile, length_tokens: int) -> float:
    """Phi_kv(l) = S_kv(l) / T_prefill(l) (paper Eq. 1), in Gbps (10^9 bit/s), per instance:
    times the prefills it runs at once (`PerfProfile.prefill_concurrency`)."""
    per_request = profile.cache_bytes(length_tokens) * 8 / profile.prefill_s(length_tokens) / 1e9
    return profile.prefill_concurrency * per_request
