"""The long timescale (paper section 4): every period, find the bottleneck, flip a PD instance
between prefill and decode (draining first), and re-optimise t with the planner.

One step, on the window of requests routed since the last step:

1. Measured bottleneck (`detect_bottleneck`): PD-P is the bottleneck when its instances are
   busy (utilisation >= busy_utilisation) with queued work above queue_s; decode when requests
   wait for a batch slot while decode instances are busy. Otherwise none.
2. Planner target: the window's post-prefix-match uncached lengths, its mean prompt and output
   lengths and the measured bandwidth go into the planner's `StageModel`; `best_configuration`
   gives N_p and t (Eq. 7-8) for the current PD instance count.
3. Actions: SetThreshold when the damped move of t (below) is more than `min_threshold_change`;
   at most one FlipRole
   per step, and none while an instance still drains: toward the planner's N_p where the
   stage gaining the instance is busy (utilisation >= busy_utilisation) and the measured
   bottleneck is not the other stage, or toward the measured bottleneck when the planner is
   content but the other side is idle (utilisation under idle_utilisation).

Outside overload a step with neither PD stage busy holds roles and t: a move for capacity
buys nothing while nothing is short and lags when the mix moves back (docs/scheduler.md).

In overload (admission control refused >= overload_refusal_fraction of the window's routed
requests) steps 2-3 change: the flip needs the admission refusals by stage to point at the
stage that is short and the planner's N_p to point the same way (`_overload_flip_role`); t
moves with a flip, to the planner's best for the PD-P count after it, or alone only to
relieve the prefill side that refuses (`_overload_threshold`; docs/scheduler.md, "The slow
loop in overload").

Damping (issue 27: undamped, t swung 3.6K -> 9.5K -> 1.0K within 240 s on a held-out trace and
cost 4-5% of the requests in SLO against the loop off). A threshold move is taken only when

- the planner predicts a gain in Lambda_max (at the post-flip N_p, target t against the current
  t) above its noise: the gain is computed on each half of the window (alternate requests) too,
  and must exceed both `min_gain_fraction` and the split-half spread |g1 - g2| / 2 (the
  standard error of a mean of two estimates), so a window too small or too mixed to tell the
  two thresholds apart leaves t alone;
- and it is then limited to a factor (1 + `max_threshold_step_fraction`) per period, and a move
  against the direction of the previous one must be larger than `reversal_change` (hysteresis).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from prfaas.planner.errors import PlanError
from prfaas.planner.model import Hardware, StageModel
from prfaas.planner.optimise import Stage, best_configuration
from prfaas.planner.scenario import RebalanceFile
from prfaas.scheduler.decisions import (
    FlipRole,
    RebalanceAction,
    RebalanceReason,
    Rejection,
    RejectReason,
    RouteDecision,
    ServePath,
    SetThreshold,
)
from prfaas.scheduler.view import ClusterView, Role, RouteRequest
from prfaas.workload.lengths import EmpiricalLengths
from prfaas.workload.workload import Workload


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    """`hardware` gives profiles, PrfaaS size and SLO; its link_gbps is replaced by the measured
    bandwidth at each step. No defaults here: they are the file schema's (`RebalanceFile`),
    the one set the simulator and the live router both read (`of`)."""

    hardware: Hardware
    period_s: float
    min_samples: int
    step_tokens: int
    busy_utilisation: float
    idle_utilisation: float
    queue_s: float
    min_threshold_change: float
    overload_refusal_fraction: float
    refusal_dominance: float
    max_threshold_step_fraction: float
    reversal_change: float
    min_gain_fraction: float

    @classmethod
    def of(cls, hardware: Hardware, settings: RebalanceFile) -> RebalanceConfig:
        """The slow loop of `hardware` with a file's settings (the schema's fields; a host's
        own additions, such as the live router's drain timeout, are not the loop's)."""
        return cls(hardware, **settings.model_dump(include=set(RebalanceFile.model_fields)))


@dataclass(frozen=True, slots=True)
class StageStats:
    """What the host measured over the period: busy fractions and decode admission waits."""

    pd_prefill_utilisation: float
    pd_decode_utilisation: float
    pd_prefill_queue_s: float
    decode_waiting_requests: int
    link_capacity_bytes_per_s: float


_DECODE_REFUSALS = frozenset({RejectReason.DECODE_BATCH_FULL, RejectReason.PREDICTED_TPOT_OVER_SLO})


@dataclass(slots=True)
class Window:
    """Lengths of the requests dispatched since the last step (post-prefix-match: the best hit
    anywhere), and the requests admission control refused meanwhile, by the stage that was
    short: the chosen decode instance's batch was full, or the predicted TTFT was over the SLO
    on a PD-P or a PrfaaS prefill."""

    uncached_tokens: list[int] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    refused_at_decode: int = 0
    refused_at_pd_prefill: int = 0
    refused_at_prfaas: int = 0

    def observe(self, request: RouteRequest, decision: RouteDecision) -> None:
        best = max(request.hit_tokens.values(), default=0)
        self.uncached_tokens.append(max(1, request.input_tokens - min(best, request.input_tokens)))
        self.input_tokens += request.input_tokens
        self.output_tokens += request.output_tokens

    def observe_refusal(self, decision: RouteDecision, refusal: Rejection) -> None:
        if refusal.reason in _DECODE_REFUSALS:
            self.refused_at_decode += 1
        elif decision.path is ServePath.PRFAAS:
            self.refused_at_prfaas += 1
        else:
            self.refused_at_pd_prefill += 1

    @property
    def num_refused(self) -> int:
        return self.refused_at_decode + self.refused_at_pd_prefill + self.refused_at_prfaas

    @property
    def refused_fraction(self) -> float:
        """Refused / routed (dispatched + refused) over the window."""
        return self.num_refused / max(1, len(self.uncached_tokens) + self.num_refused)


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
        # The last flip made in overload: the role it gave and the share of routed requests
        # that the stage it fed refused in the window that led to it.
        self._overload_flip: tuple[Role, float] | None = None
        self._last_move = 0  # direction of the last threshold move: 1 up, -1 down, 0 none

    def _model(
        self, view: ClusterView, stats: StageStats, window: Window, uncached: list[int]
    ) -> StageModel:
        """The planner's stage model of `uncached` lengths (the window's, or a part of them) at
        the window's mean prompt and output and the measured bandwidth."""
        cfg = self.config
        num = len(window.uncached_tokens)
        workload = Workload(
            uncached_input=EmpiricalLengths.of(uncached),
            mean_input_tokens=window.input_tokens / num,
            mean_output_tokens=max(1.0, window.output_tokens / num),
            prefix_hit_fraction=0.0,
            description="observed window",
        )
        n_pd = view.count(Role.PD_PREFILL) + view.count(Role.PD_DECODE)
        hw = replace(
            cfg.hardware,
            prfaas=replace(cfg.hardware.prfaas, num_instances=view.count(Role.PRFAAS)),
            pd=replace(cfg.hardware.pd, num_instances=n_pd),
            link_gbps=max(stats.link_capacity_bytes_per_s * 8 / 1e9, 1e-6),
        )
        return StageModel.build(hw, workload, cfg.step_tokens)

    def target(
        self, view: ClusterView, stats: StageStats, window: Window, n_p: int | None = None
    ) -> tuple[int, int]:
        """The planner's (N_p, t) for this window and the measured bandwidth; with `n_p`, the
        best t for that many PD-P instances."""
        model = self._model(view, stats, window, window.uncached_tokens)
        n_pd = model.hardware.pd.num_instances
        choices = range(1, n_pd) if n_p is None else [n_p]
        best_n_p, k = best_configuration(model, model.hardware.prfaas.num_instances, choices, n_pd)
        return best_n_p, round(float(model.split.threshold_tokens[k]))

    def step(
        self, view: ClusterView, stats: StageStats, window: Window, threshold_tokens: int
    ) -> list[RebalanceAction]:
        if len(window.uncached_tokens) < self.config.min_samples:
            return []
        n_p = len(view.accepting(Role.PD_PREFILL))  # after this step's flip (a drain: neither)
        try:
            target_n_p, _ = self.target(view, stats, window)
            overload = window.refused_fraction >= self.config.overload_refusal_fraction
            if not overload and not self._busy(stats):
                return []
            if overload:
                flip = self._overload_flip_role(view, window, target_n_p)
            else:
                self._overload_flip = None
                flip = self._flip(view, stats, target_n_p)
            if flip is not None:
                n_p += 1 if flip.to_role is Role.PD_PREFILL else -1
            _, target_t = self.target(view, stats, window, max(1, n_p))
            if flip is not None or not overload:
                new_t = self._damped_threshold(
                    view,
                    stats,
                    window,
                    n_p=max(1, n_p),
                    current_t=threshold_tokens,
                    target_t=target_t,
                )
            else:
                new_t = self._overload_threshold(window, threshold_tokens, target_t)
        except PlanError:
            return []
        actions: list[RebalanceAction] = []
        if view.count(Role.PRFAAS) and new_t is not None:
            actions.append(SetThreshold(new_t, RebalanceReason.PLANNER_REOPTIMISED))
        if flip is not None:
            actions.append(flip)
        return actions

    def _busy(self, stats: StageStats) -> bool:
        """Is a PD stage near its capacity? PrfaaS's load shows as refusals (overload)."""
        busy = self.config.busy_utilisation
        return max(stats.pd_prefill_utilisation, stats.pd_decode_utilisation) >= busy

    def _predicted_gain(self, model: StageModel, n_p: int, current_t: int, target_t: int) -> float:
        """Lambda_max at `target_t` over Lambda_max at `current_t`, less 1, at `n_p` PD-P."""
        edges = model.split.threshold_tokens
        n_pd = model.hardware.pd.num_instances
        rates = model.rates(model.hardware.prfaas.num_instances, n_p, n_pd - n_p).lambda_max
        at = [int(np.abs(edges - t).argmin()) for t in (current_t, target_t)]
        before, after = float(rates[at[0]]), float(rates[at[1]])
        return after / before - 1.0 if before > 0 else float("inf")

    def _damped_threshold(
        self,
        view: ClusterView,
        stats: StageStats,
        window: Window,
        *,
        n_p: int,
        current_t: int,
        target_t: int,
    ) -> int | None:
        """The threshold to set, or None to keep `current_t` (module docstring, Damping)."""
        cfg = self.config
        change = (target_t - current_t) / max(current_t, 1)
        direction = 1 if change > 0 else -1
        # Raising t relieves PrfaaS, lowering it PD-P: never feed the side that refuses more,
        # and a move relieving it is no reversal to hold back (refusals are the evidence).
        relieves = int(np.sign(window.refused_at_prfaas - window.refused_at_pd_prefill))
        if relieves == -direction:
            return None
        reversal = direction == -self._last_move and relieves != direction
        needed = cfg.reversal_change if reversal else cfg.min_threshold_change
        if abs(change) <= needed:
            return None
        tokens = window.uncached_tokens
        gains = [
            self._predicted_gain(self._model(view, stats, window, part), n_p, current_t, target_t)
            for part in (tokens, tokens[0::2], tokens[1::2])
        ]
        noise = abs(gains[1] - gains[2]) / 2
        if not gains[0] > max(cfg.min_gain_fraction, noise):
            return None
        return self._move(direction, current_t, target_t)

    def _overload_threshold(self, window: Window, current_t: int, target_t: int) -> int | None:
        """In overload without a flip, t moves only to relieve the prefill side that refuses:
        up (fewer requests to PrfaaS) when PrfaaS's refusals are at least
        overload_refusal_fraction of the routed requests and `refusal_dominance` x PD-P's,
        down in the mirror case, and only where the planner's t for the current N_p lies that
        way. The planner alone, in overload, cost requests in SLO (its steady state assumes
        every request served); refusals alone do not say how far to go. On a diurnal ramp t
        followed the shorter prompts of the rising load down, the peak's longer ones then
        overran PrfaaS, and t stayed where it was because overload froze it (x0.9, seed 3:
        3,723 in SLO against 3,754 with the loop off)."""
        cfg = self.config
        routed = len(window.uncached_tokens) + window.num_refused
        floor = cfg.overload_refusal_fraction * routed
        at_prfaas, at_pd_p = window.refused_at_prfaas, window.refused_at_pd_prefill
        if at_prfaas >= floor and at_prfaas >= cfg.refusal_dominance * at_pd_p:
            direction = 1
        elif at_pd_p >= floor and at_pd_p >= cfg.refusal_dominance * at_prfaas:
            direction = -1
        else:
            return None
        if direction * (target_t - current_t) / max(current_t, 1) <= cfg.min_threshold_change:
            return None
        return self._move(direction, current_t, target_t)

    def _move(self, direction: int, current_t: int, target_t: int) -> int:
        """t toward `target_t`, by at most a factor (1 + max_threshold_step_fraction)."""
        factor = 1.0 + self.config.max_threshold_step_fraction
        self._last_move = direction
        return round(min(max(target_t, current_t / factor), current_t * factor))

    def _overload_flip_role(
        self, view: ClusterView, window: Window, target_n_p: int
    ) -> FlipRole | None:
        """In overload (admission refuses >= overload_refusal_fraction of what is routed) flip
        toward the PD stage whose refusals are at least that fraction of the routed requests
        and `refusal_dominance` x the other PD stage's, and only where the planner's N_p on
        the window's mix (`target_n_p`) asks for a move the same way: refusals alone moved a
        PD-P instance to decode on a prefix-heavy trace and cost 2% of the requests in SLO
        against the loop off (its prefill and prefix cache were worth more than the decode
        slots). A flip that undoes the last
        overload flip needs more: the stage it would feed must now refuse `refusal_dominance`
        x the share the other stage refused when that flip was made (hysteresis: after a flip
        the stage it took from refuses more, and load moves between windows; undoing on any
        rise would flap)."""
        if any(not i.is_accepting for i in view.instances):
            return None  # one drain at a time
        cfg = self.config
        routed = len(window.uncached_tokens) + window.num_refused
        at_decode, at_prefill = window.refused_at_decode, window.refused_at_pd_prefill
        floor = cfg.overload_refusal_fraction * routed
        if at_decode >= floor and at_decode >= cfg.refusal_dominance * at_prefill:
            to_role, from_role, refused = Role.PD_DECODE, Role.PD_PREFILL, at_decode
            reason = RebalanceReason.DECODE_BOTTLENECK
        elif at_prefill >= floor and at_prefill >= cfg.refusal_dominance * at_decode:
            to_role, from_role, refused = Role.PD_PREFILL, Role.PD_DECODE, at_prefill
            reason = RebalanceReason.PREFILL_BOTTLENECK
        else:
            return None
        n_p = view.count(Role.PD_PREFILL)
        wanted = target_n_p < n_p if to_role is Role.PD_DECODE else target_n_p > n_p
        if not wanted:
            return None  # the planner, on the window's mix, would keep or move the other way
        share = refused / routed
        last = self._overload_flip
        if last is not None and last[0] is not to_role and share < cfg.refusal_dominance * last[1]:
            return None
        donors = view.accepting(from_role)
        if len(donors) <= 1:
            return None
        self._overload_flip = (to_role, share)
        donor = max(donors, key=lambda i: i.instance_id)
        return FlipRole(donor.instance_id, to_role, reason)

    def _flip(self, view: ClusterView, stats: StageStats, target_n_p: int) -> FlipRole | None:
        """Toward the planner's N_p where the stage gaining the instance is busy (utilisation >=
        busy_utilisation) and the measured bottleneck is not the other stage. A flip toward a
        stage with room adds capacity nobody uses and costs a drain and the donor's prefix
        cache: on a diurnal ramp at x0.9 the planner moved a PD-P instance to decode at 11%
        decode utilisation, moved one back 240 s later, and the loop kept 3,731 in SLO against
        3,757 off. Or toward the measured bottleneck when the other side is idle."""
        if any(not i.is_accepting for i in view.instances):
            return None  # one drain at a time
        bottleneck = detect_bottleneck(stats, self.config)
        n_p = view.count(Role.PD_PREFILL)
        idle = self.config.idle_utilisation
        busy = self.config.busy_utilisation
        to_prefill = (
            target_n_p > n_p
            and bottleneck is not Stage.PD_D
            and stats.pd_prefill_utilisation >= busy
        ) or (bottleneck is Stage.PD_P and stats.pd_decode_utilisation < idle)
        to_decode = (
            target_n_p < n_p
            and bottleneck is not Stage.PD_P
            and stats.pd_decode_utilisation >= busy
        ) or (bottleneck is Stage.PD_D and stats.pd_prefill_utilisation < idle)
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
