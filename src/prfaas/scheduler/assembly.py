"""One scheduler assembly for the simulator and the live router.

Both hosts read the same settings from their files and hand them here; nothing else builds a
`GlobalScheduler` outside tests:

    setup = SchedulerSetup(policy, threshold_tokens, admission, ttft_slo_s, rebalance, tpot_slo_s)
    missing = missing_roles(setup.policy, roles)         # refused before anything starts
    scheduler = assemble(setup, SchedulerConfig(...), hardware)

    scenario file (sim.config)          deployment file (serve.config)
    simulation.policy                   policy
    the plan's t (or deployment's)      threshold_tokens
    simulation.admission + slo.ttft_s   router.admission (+ its ttft_slo_s)
    simulation.rebalance (absent: off)  rebalance (enabled: false: off)

`SchedulerConfig` (timing models, triggers, whether the host moves cache) is the host's own:
its profiles are the scenario's chips in the simulator and the instances' published timing
live. The slow loop runs for the `prfaas` policy only (a baseline's point is that it keeps its
fixed rule), with the `RebalanceFile` schema's settings on the host's `Hardware`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from prfaas.planner.model import Hardware
from prfaas.planner.scenario import AdmissionFile, RebalanceFile
from prfaas.scheduler.admission import AdmissionConfig, AdmissionMode, AdmissionPolicy
from prfaas.scheduler.baselines import check_policy, make_policy
from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.rebalancer import RebalanceConfig, RebalancePolicy
from prfaas.scheduler.scheduler import GlobalScheduler
from prfaas.scheduler.view import Role

#: The prefill roles each policy routes to: without one of them it would refuse (or silently
#: reroute) whole classes of requests, so a deployment lacking it is refused up front. PrfaaS
#: routing needs none in particular: it is the default, and on a PD cluster alone (no PrfaaS
#: instance yet, or a single-cluster deployment) every request takes the PD-P path.
REQUIRED_ROLES: dict[str, tuple[Role, ...]] = {
    "prfaas": (),
    "homogeneous": (Role.PD_PREFILL,),
    "naive": (Role.PRFAAS,),
    "fixed": (Role.PRFAAS, Role.PD_PREFILL),
    "dynamo": (Role.PRFAAS, Role.PD_PREFILL),
}
#: The slow loop re-optimises PrfaaS's t and split; the baselines keep their fixed rules.
SLOW_LOOP_POLICIES = frozenset({"prfaas"})


@dataclass(frozen=True, slots=True)
class SchedulerSetup:
    """What a host's file says of its scheduler. `threshold_tokens`: t at start (the scheduler
    owns it from then on). `ttft_slo_s`: the objective admission control holds requests to.
    `rebalance`: the slow loop's settings, None when it is off. `tpot_slo_s`: the TPOT
    objective admission holds the decode step to (the simulator: the scenario's `slo.tpot_s`;
    live: none yet, the decode batch is bounded by BS_max only)."""

    policy: str
    threshold_tokens: int
    admission: AdmissionFile
    ttft_slo_s: float
    rebalance: RebalanceFile | None = None
    tpot_slo_s: float | None = None

    def __post_init__(self) -> None:
        check_policy(self.policy)


def missing_roles(policy: str, roles: Collection[Role]) -> list[Role]:
    """The prefill roles `policy` routes to that no instance holds (empty: it can route)."""
    return [role for role in REQUIRED_ROLES[check_policy(policy)] if role not in roles]


def admission_policy(
    settings: AdmissionFile, ttft_slo_s: float, tpot_slo_s: float | None = None
) -> AdmissionPolicy | None:
    """The admission control of `settings` (None when off: the scheduler admits everything)."""
    mode = AdmissionMode(settings.mode)
    if mode is AdmissionMode.OFF:
        return None
    return AdmissionPolicy(
        AdmissionConfig(
            mode=mode,
            ttft_slo_s=ttft_slo_s,
            tpot_slo_s=tpot_slo_s,
            margin_fraction=settings.margin_fraction,
            max_defer_s=settings.max_defer_s,
        )
    )


def assemble(setup: SchedulerSetup, config: SchedulerConfig, hardware: Hardware) -> GlobalScheduler:
    """The scheduler of `setup` over the host's timing models (`config`) and `hardware` (what
    the slow loop plans with)."""
    rebalancer = None
    if setup.rebalance is not None and setup.policy in SLOW_LOOP_POLICIES:
        rebalancer = RebalancePolicy(RebalanceConfig.of(hardware, setup.rebalance))
    return GlobalScheduler(
        make_policy(setup.policy, config),
        config,
        setup.threshold_tokens,
        rebalancer,
        admission_policy(setup.admission, setup.ttft_slo_s, setup.tpot_slo_s),
    )
