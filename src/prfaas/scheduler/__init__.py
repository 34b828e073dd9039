"""The global scheduler (paper section 4), pure logic shared by the simulator and the router.

Short timescale: `GlobalScheduler.route` places each request through a `RoutingPolicy`
(`PrfaasPolicy` or a baseline) and answers a `RouteDecision` (or a `Rejection`) with a reason
code; an optional `AdmissionPolicy` sheds or defers what would miss the TTFT SLO.
Long timescale: `RebalancePolicy` flips PD roles and re-optimises t with the planner.
`assemble` builds the whole from one `SchedulerSetup`, for the simulator and the router alike.
It sees the world only through `ClusterView` and imports specs, workload, planner and kvcache,
never sim or serve (docs/architecture.md). Triggers and defaults: docs/scheduler.md.
"""

from __future__ import annotations

from prfaas.scheduler.admission import (
    AdmissionConfig,
    AdmissionMode,
    AdmissionPolicy,
    predict_ttft_s,
)
from prfaas.scheduler.assembly import (
    REQUIRED_ROLES,
    SchedulerSetup,
    admission_policy,
    assemble,
    missing_roles,
)
from prfaas.scheduler.bandwidth import BandwidthModeTracker, link_pressure
from prfaas.scheduler.baselines import (
    POLICIES,
    DynamoConditionalPolicy,
    FixedThresholdPolicy,
    HomogeneousPdPolicy,
    NaiveHeterogeneousPolicy,
    check_policy,
    make_policy,
)
from prfaas.scheduler.config import BandwidthConfig, SchedulerConfig
from prfaas.scheduler.decisions import (
    BandwidthMode,
    CacheMove,
    Decision,
    Deferral,
    FlipRole,
    Reason,
    RebalanceAction,
    RebalanceReason,
    Rejection,
    RejectReason,
    RouteDecision,
    ServePath,
    SetThreshold,
)
from prfaas.scheduler.load import DispatchLedger, choose_decode, choose_prefill
from prfaas.scheduler.placement import PathChoice
from prfaas.scheduler.policies import PrfaasPolicy, RoutingPolicy
from prfaas.scheduler.rebalancer import RebalanceConfig, RebalancePolicy, StageStats, Window
from prfaas.scheduler.scheduler import GlobalScheduler
from prfaas.scheduler.view import ClusterView, InstanceView, LinkView, Role, RouteRequest

__all__ = [
    "POLICIES",
    "REQUIRED_ROLES",
    "AdmissionConfig",
    "AdmissionMode",
    "AdmissionPolicy",
    "BandwidthConfig",
    "BandwidthMode",
    "BandwidthModeTracker",
    "CacheMove",
    "ClusterView",
    "Decision",
    "Deferral",
    "DispatchLedger",
    "DynamoConditionalPolicy",
    "FixedThresholdPolicy",
    "FlipRole",
    "GlobalScheduler",
    "HomogeneousPdPolicy",
    "InstanceView",
    "LinkView",
    "NaiveHeterogeneousPolicy",
    "PathChoice",
    "PrfaasPolicy",
    "Reason",
    "RebalanceAction",
    "RebalanceConfig",
    "RebalancePolicy",
    "RebalanceReason",
    "RejectReason",
    "Rejection",
    "Role",
    "RouteDecision",
    "RouteRequest",
    "RoutingPolicy",
    "SchedulerConfig",
    "SchedulerSetup",
    "ServePath",
    "SetThreshold",
    "StageStats",
    "Window",
    "admission_policy",
    "assemble",
    "check_policy",
    "choose_decode",
    "choose_prefill",
    "link_pressure",
    "make_policy",
    "missing_roles",
    "predict_ttft_s",
]
