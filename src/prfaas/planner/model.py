"""The steady-state throughput model of a PrfaaS-PD deployment (paper section 4, Eq. 2-6).

Requests with uncached length l > t are prefilled in the PrfaaS cluster and their KVCache crosses
the link; the rest are prefilled by the PD cluster's PD-P instances; every request decodes on a
PD-D instance. With p = P(l > t), l_long = E[l | l > t], l_short = E[l | l <= t]:

    Theta_prfaas = min(N_prfaas / T_prfaas(l_long), B_out / S_kv(l_long))    (3)
    Theta_pdp    = N_p / T_pd(l_short)                                       (4)
    Theta_pdd    = N_d * BS_max / (T_decode * L_out)                         (5)
    Lambda_max   = min(Theta_prfaas / p, Theta_pdp / (1 - p), Theta_pdd)     (6)

We follow the paper literally: a stage's rate is its instance count over the prefill time *of
the stage's mean length* (T(E[l]), not E[T(l)]). An instance that prefills d prompts at once
(attention-DP ranks, `PerfProfile.prefill_concurrency`) counts as d prefill servers: N in
Eq. 3-4 is then N x d, each at T, the one-request latency that is also its TTFT. A bound whose
share of requests is zero is infinite (no requests, no limit), which makes the baselines ends
of the same grid: homogeneous PD is t = max (p = 0, N_prfaas = 0) and naive heterogeneous is
t = 0 (p = 1, N_p = 0).

BS_max is the largest decode batch that both meets the per-request decode SLO (its step time
at the mean decode context, from the PD chip's `PerfProfile`) and fits the PD-D instance's KV
capacity (`specs.memory`: HBM less weights and activations, over the cache bytes of a request's
whole prompt and output), and T_decode is that batch's step time. The simulator gives each decode
instance the same KV capacity, so the two bound the batch alike for dense, hybrid, MoE and MLA
models. Where the weights do not fit, only the latency bound applies (`specs.memory`).

`StageModel.build` evaluates the profiles once on the threshold grid (and at every histogram
bin, for TTFT); everything after is numpy arithmetic on those arrays, broadcast over instance
counts by `rates`. Callers: `planner.optimise` (the search) and `planner.plan` (the report).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.margins import Margins
from prfaas.planner.queueing import StageServiceMoments, usable_utilisation
from prfaas.specs.memory import InstanceMemory
from prfaas.specs.perf import PerfProfile
from prfaas.specs.timing import Parallelism, default_parallelism
from prfaas.workload.lengths import FloatArray, LengthHistogram, ThresholdSplit
from prfaas.workload.workload import Workload

#: Largest decode batch considered when searching BS_max.
MAX_DECODE_BATCH = 4096


@dataclass(frozen=True, slots=True)
class Cluster:
    """A homogeneous cluster: `num_instances` instances timed by one profile, each with the
    memory of `specs.memory` (None: not modelled, as for the live router's published profiles,
    which know no chip; decode is then bounded by the latency objective alone). `parallelism`
    is how each instance's GPUs are split, where the builder chose one (None: the default split
    of `specs.timing.default_parallelism`, what an unsearched instance is timed with)."""

    profile: PerfProfile
    num_instances: int
    memory: InstanceMemory | None = None
    parallelism: Parallelism | None = None

    @property
    def split(self) -> Parallelism:
        """The split of each instance's GPUs (engine rules read it: `planner.engine_rules`)."""
        if self.parallelism is not None:
            return self.parallelism
        return default_parallelism(self.profile.model, self.profile.gpus_per_instance)

    @property
    def num_gpus(self) -> int:
        return self.num_instances * self.profile.gpus_per_instance

    @property
    def price(self) -> float:
        """In units of the catalog's reference GPU (H20 = 1)."""
        return self.num_gpus * self.profile.chip.relative_price


@dataclass(frozen=True, slots=True)
class Hardware:
    """A PrfaaS cluster linked to a local PD cluster, and the SLOs they serve under: the decode
    rate, and optionally a TTFT objective (the mean TTFT of each prefill path, queueing
    included: `planner.queueing`; None, as in the paper's case study, rates prefill stages
    fully busy, Eq. 3-4).

    `pd` is the PD cluster in the shape of its PD-P instances, and of its PD-D instances too
    unless `pd_decode` gives them their own (the same GPUs in another shape, from the
    parallelism search). Instances of two shapes cannot flip roles, so only a plan with
    `pd_decode` None can be rebalanced by the slow loop (docs/planner.md).

    `margins` (None: none, the default) are fixed factors on the stage times and rates
    (`planner.margins`, `prfaas plan --margins`); the simulator never reads them."""

    prfaas: Cluster
    pd: Cluster
    link_gbps: float
    decode_slo_tokens_per_s: float
    pd_decode: Cluster | None = None
    ttft_slo_s: float | None = None
    margins: Margins | None = None

    def __post_init__(self) -> None:
        if self.pd_decode is None:
            return
        p, d = self.pd.profile, self.pd_decode.profile
        if p.chip != d.chip or self.pd.num_gpus != self.pd_decode.num_gpus:
            raise ValueError(
                "pd_decode is the PD cluster's GPUs in another shape: same chip and GPUs"
            )

    def timed(self, profile: PerfProfile) -> PerfProfile:
        """`profile` as the planner times it: with the margins' latency corrections, if any."""
        return profile if self.margins is None else self.margins.corrected(profile)

    @property
    def prefill_rate_factor(self) -> float:
        return 1.0 if self.margins is None else self.margins.prefill_rate

    @property
    def decode_rate_factor(self) -> float:
        return 1.0 if self.margins is None else self.margins.decode_rate

    @property
    def decode_cluster(self) -> Cluster:
        """The PD cluster in the shape of its PD-D instances."""
        return self.pd if self.pd_decode is None else self.pd_decode

    def pd_gpus(self, n_p: int, n_d: int) -> int:
        """GPUs of N_p PD-P and N_d PD-D instances, each in its role's shape."""
        return (
            n_p * self.pd.profile.gpus_per_instance
            + n_d * self.decode_cluster.profile.gpus_per_instance
        )

    def pd_splits(self, num_gpus: int) -> list[tuple[int, int]]:
        """Every (N_p, N_d), both at least 1, on `num_gpus` PD-chip GPUs: N_d is as many PD-D
        instances as fit beside N_p PD-P ones. With one shape this is N_p + N_d = N, the
        paper's grid; with two, GPUs one shape cannot divide stay idle."""
        p_gpus = self.pd.profile.gpus_per_instance
        d_gpus = self.decode_cluster.profile.gpus_per_instance
        splits = []
        for n_p in range(1, num_gpus // p_gpus + 1):
            n_d = (num_gpus - n_p * p_gpus) // d_gpus
            if n_d >= 1:
                splits.append((n_p, n_d))
        return splits


@dataclass(frozen=True, slots=True)
class DecodeCapacity:
    """BS_max and T_decode of one PD-D instance (Eq. 5), and the two bounds BS_max is the least
    of: `latency_batch_size` (the SLO) and `memory_batch_size` (the KV capacity; None where the
    weights do not fit and no capacity is defined)."""

    max_batch_size: int
    step_s: float
    context_tokens: float
    latency_batch_size: int
    memory_batch_size: int | None
    kv_capacity_bytes: float | None
    request_kv_bytes: float

    def rate_per_instance(self, mean_output_tokens: float) -> float:
        """Requests per second one PD-D instance completes: BS_max / (T_decode * L_out)."""
        return self.max_batch_size / (self.step_s * mean_output_tokens)


def _latency_batch(profile: PerfProfile, slo_tokens_per_s: float, context_tokens: int) -> int:
    """The largest batch whose step time is within 1 / SLO (step time grows with the batch)."""
    budget_s = 1.0 / slo_tokens_per_s
    if profile.decode_step_s(1, context_tokens) > budget_s:
        raise InfeasiblePlanError(
            f"decode: even one request misses the {slo_tokens_per_s:g} tokens/s SLO on "
            f"{profile.chip.name} x{profile.gpus_per_instance} "
            f"({profile.decode_step_s(1, context_tokens) * 1e3:.1f} ms per step)"
        )
    lo, hi = 1, MAX_DECODE_BATCH  # invariant: lo meets the budget
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (
            (mid, hi) if profile.decode_step_s(mid, context_tokens) <= budget_s else (lo, mid - 1)
        )
    return lo


def decode_capacity(
    profile: PerfProfile,
    slo_tokens_per_s: float,
    context: float,
    request_tokens: float,
    kv_capacity: float | None = None,
) -> DecodeCapacity:
    """BS_max: the latency bound at mean decode context `context`, capped by how many requests
    of `request_tokens` (prompt + output: the KV a request holds at its end) the instance's KV
    capacity `kv_capacity` holds (None: no memory bound)."""
    context_tokens = round(context)
    latency = _latency_batch(profile, slo_tokens_per_s, context_tokens)
    request_bytes = profile.cache_bytes(max(1, round(request_tokens)))
    memory = None if kv_capacity is None else int(kv_capacity // request_bytes)
    if kv_capacity is not None and memory is not None and memory < 1:
        raise InfeasiblePlanError(
            f"decode: one request's KV ({request_bytes / 1e9:,.1f} GB) exceeds the "
            f"{kv_capacity / 1e9:,.1f} GB KV capacity of {profile.chip.name} "
            f"x{profile.gpus_per_instance}"
        )
    batch = latency if memory is None else min(latency, memory)
    return DecodeCapacity(
        max_batch_size=batch,
        step_s=profile.decode_step_s(batch, context_tokens),
        context_tokens=context,
        latency_batch_size=latency,
        memory_batch_size=memory,
        kv_capacity_bytes=kv_capacity,
        request_kv_bytes=request_bytes,
    )


def _evaluate(fn: Callable[[int], float], lengths: FloatArray) -> FloatArray:
    """fn at each length (rounded to a token); NaN where the length is NaN."""
    out = np.full(lengths.shape, np.nan)
    for i, length in enumerate(lengths):
        if np.isfinite(length):
            out[i] = fn(max(1, round(float(length))))
    return out


def _share_bound(rate: FloatArray, share: FloatArray) -> FloatArray:
    """rate / share, infinite where the share is zero (a stage with no requests never binds)."""
    rate, share = np.broadcast_arrays(rate, share)
    out = np.full(rate.shape, np.inf)
    np.divide(rate, share, out=out, where=share > 0)
    return out


@dataclass(frozen=True, slots=True, eq=False)
class StageRates:
    """Eq. 3-6 for one choice of instance counts, over thresholds (arrays broadcast together)."""

    theta_prfaas: FloatArray
    theta_pd_p: FloatArray
    theta_pd_d: FloatArray
    prfaas_compute: FloatArray  # the PrfaaS cluster's prefill rate, before the link's bound
    prfaas_bound: FloatArray  # Theta_prfaas / p: the arrival rate PrfaaS can absorb
    pd_p_bound: FloatArray  # Theta_pdp / (1 - p)
    lambda_max: FloatArray


@dataclass(frozen=True, slots=True, eq=False)
class StageModel:
    """Per-instance stage times on the threshold grid; see the module docstring."""

    hardware: Hardware
    histogram: LengthHistogram
    split: ThresholdSplit
    prfaas_prefill_s: FloatArray  # T_prfaas(l_long(t))
    prfaas_cache_bytes: FloatArray  # S_kv(l_long(t)) as the PrfaaS profile reports it
    pd_prefill_s: FloatArray  # T_pd(l_short(t))
    bin_prfaas_prefill_s: FloatArray  # T_prfaas at each histogram bin's mean length (TTFT)
    bin_pd_prefill_s: FloatArray
    decode: DecodeCapacity
    mean_output_tokens: float
    moments: StageServiceMoments  # each stage's mean prefill time and C_s^2, for queueing

    @classmethod
    def build(cls, hardware: Hardware, workload: Workload, step_tokens: int) -> StageModel:
        histogram = workload.uncached_input.histogram(step_tokens)
        split = histogram.split()
        prfaas, pd = hardware.timed(hardware.prfaas.profile), hardware.timed(hardware.pd.profile)
        decoder = hardware.decode_cluster
        decode = decode_capacity(
            hardware.timed(decoder.profile),
            hardware.decode_slo_tokens_per_s,
            workload.mean_decode_context_tokens,
            workload.mean_input_tokens + workload.mean_output_tokens,
            None if decoder.memory is None else decoder.memory.kv_capacity_bytes,
        )
        bin_prfaas_s = _evaluate(prfaas.prefill_s, histogram.mean_tokens)
        bin_pd_s = _evaluate(pd.prefill_s, histogram.mean_tokens)
        return cls(
            hardware=hardware,
            histogram=histogram,
            split=split,
            prfaas_prefill_s=_evaluate(prfaas.prefill_s, split.long_mean_tokens),
            prfaas_cache_bytes=_evaluate(prfaas.cache_bytes, split.long_mean_tokens),
            pd_prefill_s=_evaluate(pd.prefill_s, split.short_mean_tokens),
            bin_prfaas_prefill_s=bin_prfaas_s,
            bin_pd_prefill_s=bin_pd_s,
            decode=decode,
            mean_output_tokens=workload.mean_output_tokens,
            moments=StageServiceMoments.of(histogram.mass, bin_pd_s, bin_prfaas_s),
        )

    @property
    def link_bytes_per_s(self) -> float:
        return self.hardware.link_gbps * 1e9 / 8

    @property
    def num_thresholds(self) -> int:
        return len(self.split.threshold_tokens)

    def rates(self, n_prfaas: int, n_p: FloatArray | float, n_d: FloatArray | float) -> StageRates:
        """Eq. 3-6 at every threshold; pass `n_p`, `n_d` as (k, 1) columns to get a (k, T) grid."""
        p = self.split.offload_fraction
        n_p = np.asarray(n_p, dtype=np.float64)
        servers_prfaas = n_prfaas * self.hardware.prfaas.profile.prefill_concurrency
        servers_p = n_p * self.hardware.pd.profile.prefill_concurrency
        hw = self.hardware
        with np.errstate(invalid="ignore", divide="ignore"):
            compute = servers_prfaas / self.prfaas_prefill_s * self._busy(servers_prfaas, long=True)
            compute = compute * hw.prefill_rate_factor
            egress = self.link_bytes_per_s / self.prfaas_cache_bytes
            theta_prfaas = np.where(p > 0, np.minimum(compute, egress), 0.0)
            pd_rate = servers_p / self.pd_prefill_s * self._busy(servers_p, long=False)
            theta_pdp = np.where(p < 1, pd_rate * hw.prefill_rate_factor, 0.0)
        theta_pdd = np.asarray(n_d, dtype=np.float64) * self.decode.rate_per_instance(
            self.mean_output_tokens
        )
        theta_pdd = theta_pdd * hw.decode_rate_factor
        prfaas_bound = _share_bound(theta_prfaas, p)
        pd_p_bound = _share_bound(theta_pdp, 1.0 - p)
        lambda_max = np.minimum(np.minimum(prfaas_bound, pd_p_bound), theta_pdd)
        return StageRates(
            theta_prfaas=theta_prfaas,
            theta_pd_p=theta_pdp,
            theta_pd_d=np.broadcast_to(theta_pdd, lambda_max.shape),
            prfaas_compute=np.broadcast_to(compute, lambda_max.shape),
            prfaas_bound=prfaas_bound,
            pd_p_bound=pd_p_bound,
            lambda_max=lambda_max,
        )

    def _busy(self, num_servers: FloatArray | float, *, long: bool) -> FloatArray | float:
        """The share of a stage's full rate c / T it may carry, c its prefill servers (instances
        x prefill concurrency): 1 without a TTFT objective, else the utilisation at which its
        mean TTFT meets it (`planner.queueing`, c servers of service time T each)."""
        slo_s = self.hardware.ttft_slo_s
        if slo_s is None:
            return 1.0
        m = self.moments
        service_s, mean_s, scv = (
            (self.prfaas_prefill_s, m.long_mean_s, m.long_scv)
            if long
            else (self.pd_prefill_s, m.short_mean_s, m.short_scv)
        )
        n = np.maximum(np.asarray(num_servers, dtype=np.float64), 1.0)  # c = 0: no rate anyway
        valid = np.isfinite(service_s)
        busy = usable_utilisation(
            n, np.where(valid, service_s, 1.0), np.where(valid, mean_s, 0.0),
            np.where(valid, scv, 0.0), slo_s,
        )  # fmt: skip
        return np.where(valid, busy, np.nan)

    def ttft_s(self, threshold_index: int) -> FloatArray:
        """Paper-compatible TTFT of each histogram bin: the prefill latency on the hardware that
        serves it (bins at or above the threshold edge go to PrfaaS); no queueing, no transfer
        (layer-wise pipelining hides the KV transfer behind prefill)."""
        offloaded = np.arange(len(self.histogram.mass)) >= threshold_index
        result: FloatArray = np.where(offloaded, self.bin_prfaas_prefill_s, self.bin_pd_prefill_s)
        return result
