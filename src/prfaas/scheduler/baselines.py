"""Baseline routing policies, behind the same interface as `PrfaasPolicy`:

HomogeneousPdPolicy       every prefill on PD-P (the paper's homogeneous PD baseline)
NaiveHeterogeneousPolicy  every prefill on PrfaaS (the paper's naive heterogeneous one)
FixedThresholdPolicy      whole input length > t -> PrfaaS; no bandwidth, queue or cache
                          awareness (the routing users asked to go beyond)
DynamoConditionalPolicy   Dynamo's conditional disaggregation: remote prefill only when
                          the uncached length on the decode side exceeds t and the remote
                          prefill queue is not busy; otherwise local (here: PD-P)
"""

from __future__ import annotations

from collections.abc import Callable

from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.decisions import Reason, ServePath
from prfaas.scheduler.load import DispatchLedger
from prfaas.scheduler.placement import PathChoice, best_hit
from prfaas.scheduler.policies import PrfaasPolicy, RoutingPolicy
from prfaas.scheduler.view import ClusterView, Role, RouteRequest


class HomogeneousPdPolicy:
    name = "homogeneous"

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice:
        return PathChoice(ServePath.PD_P, Reason.HOMOGENEOUS)


class NaiveHeterogeneousPolicy:
    name = "naive"

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice:
        return PathChoice(ServePath.PRFAAS, Reason.NAIVE_ALL_REMOTE)


class FixedThresholdPolicy:
    name = "fixed"

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice:
        if request.input_tokens > threshold_tokens:
            return PathChoice(ServePath.PRFAAS, Reason.FIXED_LONG, is_cache_aware=False)
        return PathChoice(ServePath.PD_P, Reason.FIXED_SHORT, is_cache_aware=False)


class DynamoConditionalPolicy:
    name = "dynamo"

    def __init__(self, config: SchedulerConfig) -> None:
        self.busy_s = config.dynamo_busy_s

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice:
        l_pd, _ = best_hit(request, view.accepting(Role.PD_PREFILL))
        if request.input_tokens - l_pd <= threshold_tokens:
            return PathChoice(ServePath.PD_P, Reason.DYNAMO_SHORT_LOCAL)
        queue_s = min(
            (ledger.prefill_work_s(i.instance_id) for i in view.accepting(Role.PRFAAS)),
            default=float("inf"),
        )
        if queue_s >= self.busy_s:
            return PathChoice(ServePath.PD_P, Reason.DYNAMO_BUSY_LOCAL)
        return PathChoice(ServePath.PRFAAS, Reason.DYNAMO_REMOTE)


#: Every routing policy by the name a scenario (`simulation.policy`) or a deployment file
#: (`policy:`) gives it; the stateless baselines need nothing of the config.
POLICIES: dict[str, Callable[[SchedulerConfig], RoutingPolicy]] = {
    "prfaas": PrfaasPolicy,
    "homogeneous": lambda _: HomogeneousPdPolicy(),
    "naive": lambda _: NaiveHeterogeneousPolicy(),
    "fixed": lambda _: FixedThresholdPolicy(),
    "dynamo": DynamoConditionalPolicy,
}


def check_policy(name: str) -> str:
    """`name` if it names a policy, else a ValueError listing the known names."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return name


def make_policy(name: str, config: SchedulerConfig) -> RoutingPolicy:
    return POLICIES[check_policy(name)](config)
