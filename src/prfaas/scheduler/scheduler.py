"""The global scheduler: one object per deployment, run by the simulator or the live router.

    decision = scheduler.route(request, view)     # short timescale, every arrival
                                                  # (a RouteDecision, Rejection or Deferral)
    scheduler.prefill_done(request_id)            # the host reports stage completions,
    scheduler.decode_done(request_id)             # so load is counted from dispatch to done
    actions = scheduler.rebalance(view, stats)    # long timescale, every period (if enabled)

It owns the threshold t (the only copy: the policy is handed it at each decision, the slow
loop's `SetThreshold` moves it, and hosts report it by asking `threshold_tokens`), the
dispatch ledger (load at dispatch time), the routing policy, the optional
admission policy (judges the placed decision before it is dispatched), the optional
rebalancer, and the record of observed uncached lengths the rebalancer re-optimises t on.
Decisions are also appended to `decision_log` as pull-based history for reports.
"""

from __future__ import annotations

from collections import Counter

from prfaas.kvcache.ids import RequestId
from prfaas.scheduler.admission import AdmissionPolicy, decode_context_tokens, decode_window_s
from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.decisions import (
    Decision,
    Deferral,
    RebalanceAction,
    Rejection,
    RouteDecision,
    ServePath,
    SetThreshold,
)
from prfaas.scheduler.load import DispatchLedger
from prfaas.scheduler.placement import place
from prfaas.scheduler.policies import RoutingPolicy
from prfaas.scheduler.rebalancer import RebalancePolicy, StageStats, Window
from prfaas.scheduler.view import ClusterView, RouteRequest


class GlobalScheduler:
    def __init__(
        self,
        policy: RoutingPolicy,
        config: SchedulerConfig,
        threshold_tokens: int,
        rebalancer: RebalancePolicy | None = None,
        admission: AdmissionPolicy | None = None,
    ) -> None:
        """`threshold_tokens`: t at start (the planner's optimum, or the deployment file's)."""
        self.policy = policy
        self.config = config
        self._threshold_tokens = threshold_tokens
        self.rebalancer = rebalancer
        self.admission = admission
        self.ledger = DispatchLedger()
        self.reasons: Counter[str] = Counter()
        self._window = Window()

    def route(self, request: RouteRequest, view: ClusterView, waited_s: float = 0.0) -> Decision:
        """Place `request`; `waited_s` is how long admission control has deferred it so far."""
        choice = self.policy.choose(request, view, self.ledger, self._threshold_tokens)
        decision = place(request, view, self.ledger, self.config, choice)
        if isinstance(decision, Rejection):
            self.reasons[f"rejected:{decision.reason}"] += 1
            return decision
        if self.admission is not None:
            verdict = self.admission.judge(
                decision, request, view, self.ledger, self.config, waited_s=waited_s
            )
            if isinstance(verdict, Deferral):
                self.reasons["deferred"] += 1
                return verdict
            if verdict is not None:
                self.reasons[f"rejected:{verdict.reason}"] += 1
                if self.rebalancer is not None:  # refusals tell the slow loop what is short
                    self._window.observe_refusal(decision, verdict)
                return verdict
        self.reasons[f"{decision.path}:{decision.reason}"] += 1
        self._dispatch(decision, request, view)
        return decision

    def prefill_done(self, request_id: RequestId) -> None:
        self.ledger.prefill_done(request_id)

    def decode_done(self, request_id: RequestId) -> None:
        self.ledger.decode_done(request_id)

    @property
    def threshold_tokens(self) -> int:
        """t now: where it started, as the slow loop last set it."""
        return self._threshold_tokens

    def follow(self, threshold_tokens: int | None) -> None:
        """Route with the t another scheduler's slow loop set (`None`: keep ours), and drop
        the window no step of this one will read: the live router replicas that do not hold
        the slow loop's lease (`serve.router.lease`)."""
        if threshold_tokens is not None:
            self._threshold_tokens = threshold_tokens
        self._window = Window()

    def rebalance(self, view: ClusterView, stats: StageStats) -> list[RebalanceAction]:
        """Run the slow loop on what was observed since the last step; apply the new t.

        A window with fewer than `min_samples` requests is kept and extended to the next
        period (at low rates a period may never hold enough on its own)."""
        if self.rebalancer is None:
            return []
        if len(self._window.uncached_tokens) < self.rebalancer.config.min_samples:
            return []  # keep collecting: a window is never dropped for being too small
        window, self._window = self._window, Window()
        actions = self.rebalancer.step(view, stats, window, self._threshold_tokens)
        for action in actions:
            if isinstance(action, SetThreshold):
                self._threshold_tokens = action.threshold_tokens
        return actions

    def _dispatch(self, decision: RouteDecision, request: RouteRequest, view: ClusterView) -> None:
        on_prfaas = decision.path is ServePath.PRFAAS
        first_token_s, decode_end_s = decode_window_s(
            decision, request, view, self.ledger, self.config
        )
        self.ledger.dispatch(
            decision.request_id,
            decision.prefill_instance_id,
            self.config.prefill_work_s(on_prfaas, decision.uncached_tokens),
            decision.decode_instance_id,
            self.config.kv_bytes(request.input_tokens + request.output_tokens),
            first_token_s=first_token_s,
            decode_end_s=decode_end_s,
            context_tokens=decode_context_tokens(request),
        )
        if self.rebalancer is not None:  # the window feeds only the slow loop
            self._window.observe(request, decision)
