"""The scheduler's answers: a route for each request, actions from the slow loop; each with a
reason code, so logs, metrics and the simulator report say why (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId
from prfaas.scheduler.view import Role


class ServePath(StrEnum):
    PRFAAS = "prfaas"
    PD_P = "pd-p"


class BandwidthMode(StrEnum):
    """The paper's two prefix rules (section 4): judge each cluster's cache alone when bandwidth
    is scarce; use the longer prefix anywhere (moving it across) when plentiful."""

    SCARCE = "scarce"
    PLENTIFUL = "plentiful"


class Reason(StrEnum):
    """Why a request went where it went."""

    # PrfaaS policy, bandwidth scarce: l_total - l_pd against t (each cluster alone).
    SCARCE_SHORT_AT_PD = "scarce-short-at-pd"
    SCARCE_LONG_TO_PRFAAS = "scarce-long-to-prfaas"
    # PrfaaS policy, bandwidth plentiful: l_total - max(l_prfaas, l_pd) against t.
    PLENTIFUL_SHORT_AT_PD = "plentiful-short-at-pd"
    PLENTIFUL_LONG_TO_PRFAAS = "plentiful-long-to-prfaas"
    # Bandwidth plentiful but the host cannot move cache (`can_move_cache` False): l_total - l_pd
    # against t, each path restoring only its own cluster's prefix.
    PLENTIFUL_NO_MOVE_SHORT_AT_PD = "plentiful-no-move-short-at-pd"
    PLENTIFUL_NO_MOVE_LONG_TO_PRFAAS = "plentiful-no-move-long-to-prfaas"
    # PrfaaS policy gates that override the length rule.
    LINK_CONGESTED = "link-congested"
    LINK_CONGESTED_PD_P_BUSIER = "link-congested-pd-p-busier"
    PRFAAS_QUEUE_SURGE = "prfaas-queue-surge"
    # Work-conserving under bursts: a short request whose PD-P finish is far behind PrfaaS's.
    BURST_SHORT_TO_PRFAAS = "burst-short-to-prfaas"
    NO_PRFAAS_INSTANCE = "no-prfaas-instance"
    NO_PD_PREFILL_INSTANCE = "no-pd-prefill-instance"
    # Baselines.
    HOMOGENEOUS = "homogeneous"
    NAIVE_ALL_REMOTE = "naive-all-remote"
    FIXED_SHORT = "fixed-short"
    FIXED_LONG = "fixed-long"
    DYNAMO_REMOTE = "dynamo-remote"
    DYNAMO_SHORT_LOCAL = "dynamo-short-local"
    DYNAMO_BUSY_LOCAL = "dynamo-busy-local"


class RejectReason(StrEnum):
    NO_PREFILL_INSTANCE = "no-prefill-instance"
    NO_DECODE_INSTANCE = "no-decode-instance"
    # Admission control (scheduler.admission).
    PREDICTED_TTFT_OVER_SLO = "predicted-ttft-over-slo"
    DECODE_BATCH_FULL = "decode-batch-full"
    PREDICTED_TPOT_OVER_SLO = "predicted-tpot-over-slo"
    DEFERRED_TOO_LONG = "deferred-too-long"


@dataclass(frozen=True, slots=True)
class CacheMove:
    """Move `tokens` of cached prefix from one cluster to the other before prefill starts
    (bandwidth plentiful and the longer prefix sits in the other cluster)."""

    source_instance_id: InstanceId
    source_cluster_id: ClusterId
    target_cluster_id: ClusterId
    tokens: int


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Where one request runs. `reused_prefix_tokens` is what prefill restores (moved or local);
    `uncached_tokens` what it computes."""

    request_id: RequestId
    path: ServePath
    prefill_instance_id: InstanceId
    decode_instance_id: InstanceId
    reused_prefix_tokens: int
    uncached_tokens: int
    reason: Reason
    mode: BandwidthMode | None = None
    cache_move: CacheMove | None = None


@dataclass(frozen=True, slots=True)
class Rejection:
    """The request is refused. Admission control sets `retry_after_s` (when to try again) and
    `predicted_ttft_s` (what it would have seen); a missing instance sets neither."""

    request_id: RequestId
    reason: RejectReason
    retry_after_s: float | None = None
    predicted_ttft_s: float | None = None


@dataclass(frozen=True, slots=True)
class Deferral:
    """Admission control holds the request at the router: route it again in `retry_after_s`."""

    request_id: RequestId
    retry_after_s: float
    predicted_ttft_s: float


Decision = RouteDecision | Rejection | Deferral


class RebalanceReason(StrEnum):
    PREFILL_BOTTLENECK = "prefill-bottleneck"
    DECODE_BOTTLENECK = "decode-bottleneck"
    PLANNER_REOPTIMISED = "planner-reoptimised"


@dataclass(frozen=True, slots=True)
class FlipRole:
    """Drain `instance_id`, then give it `to_role` (PD-P <-> PD-D)."""

    instance_id: InstanceId
    to_role: Role
    reason: RebalanceReason


@dataclass(frozen=True, slots=True)
class SetThreshold:
    threshold_tokens: int
    reason: RebalanceReason


RebalanceAction = FlipRole | SetThreshold
