"""The long timescale (paper section 4): every period, find the bottleneck, flip a PD instance
between prefill and decode (draining first), and re-optimise t with the planner.

One step, on the window of requests routed since the last step:

1. Measured bottleneck (`detect_bottleneck`): PD-P is the bottleneck when its instances are
   busy (utilisation >= busy_utilisation) with queued work above queue_s; decode when requests
   wait for a batch slot while decode instances are busy. Otherwise none.
2. Planner target: the window's post-prefix-match uncached lengths, its mean prompt and output
   lengths and the measured bandwidth go into the planner's `StageModel`; `best_configuration`
   gives N_p and t (Eq. 7-8) for the current PD instance count.
3. Actions: SetThreshold when t moves by more than `min_threshold_change`; at most one FlipRole
   per step, and none while an instance still drains: toward the planner's N_p unless the
   measured bottleneck contradicts it, or toward the measured bottleneck when the planner is
   content but the other side is idle (utilisation under idle_utilisation).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from prfaas.planner.errors import PlanError
from prfaas.planner.model import Cluster, Hardware, StageModel
from prfaas.planner.optimise import Stage, best_configuration
from prfaas.scheduler.decisions import (
    FlipRole,
    RebalanceAction,
    RebalanceReason,
    RouteDecision,
    SetThreshold,
)
from prfaas.scheduler.view import ClusterView, Role, RouteRequest
from prfaas.workload.lengths import EmpiricalLengths
from prfaas.workload.workload import Workload


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """`hardware` gives profiles, PrfaaS size and SLO; its link_gbps is replaced by the measured
    bandwidth at each step."""

    hardware: Hardware
    period_s: float = 120.0
    min_samples: int = 200
    step_tokens: int = 500
    busy_utilisation: float = 0.85
    idle_utilisation: float = 0.5
    queue_s: float = 10.0
    min_threshold_change: float = 0.05


@dataclass(frozen=True, slots=True)
class StageStats:
    """What the host measured over the period: busy fractions and decode admission waits."""

    pd_prefill_utilisation: float
    pd_decode_utilisation: float
    pd_prefill_queue_s: float
    decode_waiting_requests: int
    link_capacity_bytes_per_s: float


@dataclass(slots=True)
class Window:
    """Lengths seen since the last step (post-prefix-match: the best hit anywhere)."""

    uncached_tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0

    def observe(self, request: RouteRequest, decision: RouteDecision) -> None:
        best = max(request.hit_tokens.values(), default=0)
        self.uncached_tokens.append(max(1, request.input_tokens - min(best, request.input_tokens)))
        self.input_tokens += request.input_tokens
        self.output_tokens += request.output_tokens


def detect_bottleneck(stats: StageStats, config: RebalanceConfig) -> Stage | None:
    if (
        stats.pd_prefill_utilisation >= config.busy_utilisation
        and stats.pd_prefill_queue_s >= config.queue_s
    ):
        return Stage.PD_P
    if stats.decode_waiting_requests > 0 and stats.pd_decode_utilisation >= config.busy_utilisation:
        return Stage.PD_D
    return None


class RebalancePolicy:
    def __init__(self, config: RebalanceConfig) -> None:
        self.config = config

    def target(self, view: ClusterView, stats: StageStats, window: Window) -> tuple[int, int]:
        """The planner's (N_p, t) for this window and the measured bandwidth."""
        cfg = self.config
        num = len(window.uncached_tokens)
        workload = Workload(
            uncached_input=EmpiricalLengths.of(window.uncached_tokens),
            mean_input_tokens=window.input_tokens / num,
            mean_output_tokens=max(1.0, window.output_tokens / num),
            prefix_hit_fraction=0.0,
            description="observed window",
        )
        n_pd = view.count(Role.PD_PREFILL) + view.count(Role.PD_DECODE)
        hw = replace(
            cfg.hardware,
            prfaas=Cluster(cfg.hardware.prfaas.profile, view.count(Role.PRFAAS)),
            pd=Cluster(cfg.hardware.pd.profile, n_pd),
            link_gbps=max(stats.link_capacity_bytes_per_s * 8 / 1e9, 1e-6),
        )
        model = StageModel.build(hw, workload, cfg.step_tokens)
        n_p, k = best_configuration(model, hw.prfaas.num_instances, range(1, n_pd), n_pd)
        return n_p, round(float(model.split.threshold_tokens[k]))

    def step(
        self, view: ClusterView, stats: StageStats, window: Window, threshold_tokens: int
    ) -> list[RebalanceAction]:
        if len(window.uncached_tokens) < self.config.min_samples:
            return []
        try:
            target_n_p, target_t = self.target(view, stats, window)
        except PlanError:
            return []
        actions: list[RebalanceAction] = []
        change = abs(target_t - threshold_tokens) / max(threshold_tokens, 1)
        if view.count(Role.PRFAAS) and change > self.config.min_threshold_change:
            actions.append(SetThreshold(target_t, RebalanceReason.PLANNER_REOPTIMISED))
        flip = self._flip(view, stats, target_n_p)
        if flip is not None:
            actions.append(flip)
        return actions

    def _flip(self, view: ClusterView, stats: StageStats, target_n_p: int) -> FlipRole | None:
        if any(not i.is_accepting for i in view.instances):
            return None  # one drain at a time
        bottleneck = detect_bottleneck(stats, self.config)
        n_p = view.count(Role.PD_PREFILL)
        idle = self.config.idle_utilisation
        to_prefill = (target_n_p > n_p and bottleneck is not Stage.PD_D) or (
            bottleneck is Stage.PD_P and stats.pd_decode_utilisation < idle
        )
        to_decode = (target_n_p < n_p and bottleneck is not Stage.PD_P) or (
            bottleneck is Stage.PD_D and stats.pd_prefill_utilisation < idle
        )
        reason = {
            Stage.PD_P: RebalanceReason.PREFILL_BOTTLENECK,
            Stage.PD_D: RebalanceReason.DECODE_BOTTLENECK,
        }.get(bottleneck or Stage.PRFAAS, RebalanceReason.PLANNER_REOPTIMISED)
        if to_prefill and view.count(Role.PD_DECODE) > 1:
            donor = max(view.accepting(Role.PD_DECODE), key=lambda i: i.instance_id)
            return FlipRole(donor.instance_id, Role.PD_PREFILL, reason)
        if to_decode and n_p > 1:
            donor = max(view.accepting(Role.PD_PREFILL), key=lambda i: i.instance_id)
            return FlipRole(donor.instance_id, Role.PD_DECODE, reason)
        return None
