"""Routing policies behind one interface: the PrfaaS policy (paper section 4) and the baselines
(homogeneous PD, naive heterogeneous, fixed threshold, Dynamo-style conditional disaggregation).

Each policy answers only *which path* (and why); `placement.place` picks instances the same way
for all of them. Rules of `PrfaasPolicy.choose`, in order (l = input tokens, t = threshold):

    mode = SCARCE or PLENTIFUL from link pressure (bandwidth.py, with hysteresis)
    SCARCE:    remote iff l - l_pd > t                     (each cluster's cache alone)
    PLENTIFUL: remote iff l - max(l_prfaas, l_pd) > t      (move the longer prefix across)
    PLENTIFUL, host cannot move cache (config.can_move_cache False):
               remote iff l - l_pd > t                     (as SCARCE; reason *-no-move-*)
    remote but no PrfaaS instance          -> PD-P  NO_PRFAAS_INSTANCE
    remote but KV would lag prefill by more than max_transfer_lag_s:
        PD-P finishes the prefill before the KV would be across -> PD-P  LINK_CONGESTED
        otherwise (PD-P further behind than the link) -> PrfaaS LINK_CONGESTED_PD_P_BUSIER
    remote but PrfaaS queue > prfaas_surge_s and PD-P finishes first -> PD-P  PRFAAS_QUEUE_SURGE
    local but no PD-P instance             -> PrfaaS NO_PD_PREFILL_INSTANCE
    local, link plentiful, PD-P queue wait - PrfaaS finish (queue + prefill, or KV across the
        link) > burst_enter_s, staying on until the gap is <= burst_leave_s
                                           -> PrfaaS BURST_SHORT_TO_PRFAAS
"""

from __future__ import annotations

from typing import Protocol

from prfaas.scheduler.bandwidth import BandwidthModeTracker
from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.decisions import BandwidthMode, CacheMove, Reason, ServePath
from prfaas.scheduler.load import DispatchLedger
from prfaas.scheduler.placement import PathChoice, best_hit
from prfaas.scheduler.view import ClusterView, Role, RouteRequest


class RoutingPolicy(Protocol):
    """Chooses a path for each request. t is passed in by its one owner, the scheduler (the
    slow loop moves it), so a policy never holds a copy that could go stale."""

    name: str

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice: ...


def _min_work_s(view: ClusterView, role: Role, ledger: DispatchLedger) -> float:
    loads = [ledger.prefill_work_s(i.instance_id) for i in view.accepting(role)]
    return min(loads, default=float("inf"))


class PrfaasPolicy:
    """Selective offload by uncached length, bandwidth- and cache-aware (paper section 4)."""

    name = "prfaas"

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.tracker = BandwidthModeTracker(config.bandwidth)
        self.is_overflowing = False  # the burst rule's hysteresis state

    def choose(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        threshold_tokens: int,
    ) -> PathChoice:
        mode = self.tracker.update(view.link)
        prfaas, pdp = view.accepting(Role.PRFAAS), view.accepting(Role.PD_PREFILL)
        l_pd, pd_index = best_hit(request, pdp)
        l_prfaas, prfaas_index = best_hit(request, prfaas)
        move: CacheMove | None = None
        if mode is BandwidthMode.SCARCE:
            remote = request.input_tokens - l_pd > threshold_tokens
            reason = Reason.SCARCE_LONG_TO_PRFAAS if remote else Reason.SCARCE_SHORT_AT_PD
        elif not self.config.can_move_cache:
            # Nothing can cross: PD-P restores l_pd and PrfaaS l_prfaas, never the other's. Judging
            # by max(l_prfaas, l_pd) would send a prompt cached only at PrfaaS to PD-P cold.
            remote = request.input_tokens - l_pd > threshold_tokens
            reason = (
                Reason.PLENTIFUL_NO_MOVE_LONG_TO_PRFAAS
                if remote
                else Reason.PLENTIFUL_NO_MOVE_SHORT_AT_PD
            )
        else:
            remote = request.input_tokens - max(l_pd, l_prfaas) > threshold_tokens
            reason = Reason.PLENTIFUL_LONG_TO_PRFAAS if remote else Reason.PLENTIFUL_SHORT_AT_PD
            if remote and l_pd > l_prfaas and prfaas:
                src = pdp[pd_index]
                move = CacheMove(src.instance_id, src.cluster_id, prfaas[0].cluster_id, l_pd)
            elif not remote and l_prfaas > l_pd and pdp:
                src = prfaas[prfaas_index]
                move = CacheMove(src.instance_id, src.cluster_id, pdp[0].cluster_id, l_prfaas)
        if remote:
            tentative = PathChoice(ServePath.PRFAAS, reason, mode, cache_move=move)
            return self._gate_remote(request, view, ledger, tentative)
        if not pdp:
            return PathChoice(ServePath.PRFAAS, Reason.NO_PD_PREFILL_INSTANCE, mode)
        overflow_ok = prfaas and mode is BandwidthMode.PLENTIFUL
        if overflow_ok and self._overflows(request, view, ledger, l_prfaas):
            return PathChoice(ServePath.PRFAAS, Reason.BURST_SHORT_TO_PRFAAS, mode)
        return PathChoice(ServePath.PD_P, reason, mode, cache_move=move)

    def _overflows(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        l_prfaas: int,
    ) -> bool:
        """The work-conserving rule for a short request, with hysteresis (docs/scheduler.md):
        does the wait in PD-P's queue alone exceed all the request would see at PrfaaS (its
        queue and prefill there, or its KV across the link behind the backlog)? Judged on the
        wait, not the finish, so an idle PD-P never loses a short request to the faster chips."""
        cfg = self.config
        prfaas_queue_s = _min_work_s(view, Role.PRFAAS, ledger)
        pd_wait_s = _min_work_s(view, Role.PD_PREFILL, ledger)
        link = view.link
        send_s = (link.bytes_waiting + cfg.kv_bytes(request.input_tokens)) / max(
            link.capacity_bytes_per_s, 1e-9
        )
        remote_s = max(
            prfaas_queue_s + cfg.prefill_s(True, request.input_tokens - l_prfaas), send_s
        )
        gap_s = pd_wait_s - remote_s
        if self.is_overflowing:
            self.is_overflowing = gap_s > cfg.burst_leave_s
        else:
            self.is_overflowing = gap_s > cfg.burst_enter_s
        return self.is_overflowing

    def _gate_remote(
        self,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        tentative: PathChoice,
    ) -> PathChoice:
        """Offload unless the link or the PrfaaS queue says PD-P will serve it better."""
        mode, move = tentative.mode, tentative.cache_move
        if not view.accepting(Role.PRFAAS):
            return PathChoice(ServePath.PD_P, Reason.NO_PRFAAS_INSTANCE, mode)
        if not view.accepting(Role.PD_PREFILL):
            return tentative
        cfg = self.config
        reused = move.tokens if move is not None else 0
        hit = max(
            reused,
            max((request.hit_on(i.instance_id) for i in view.accepting(Role.PRFAAS)), default=0),
        )
        remote_prefill_s = cfg.prefill_s(True, request.input_tokens - hit)
        prefill_end_s = _min_work_s(view, Role.PRFAAS, ledger) + remote_prefill_s
        link = view.link
        send_s = (link.bytes_waiting + cfg.kv_bytes(request.input_tokens)) / max(
            link.capacity_bytes_per_s, 1e-9
        )
        remote_s = max(prefill_end_s, send_s)  # KV fully across: prefill and link both done
        l_pd, _ = best_hit(request, view.accepting(Role.PD_PREFILL))
        local_s = _min_work_s(view, Role.PD_PREFILL, ledger) + cfg.prefill_s(
            False, request.input_tokens - l_pd
        )
        if send_s - prefill_end_s > cfg.bandwidth.max_transfer_lag_s:
            if local_s < remote_s:
                return PathChoice(ServePath.PD_P, Reason.LINK_CONGESTED, mode)
            # PD-P is even further behind than the link: diverting would only move the queue
            # (and overload PD-P with long prefills); hold the request on the PrfaaS path.
            return PathChoice(
                ServePath.PRFAAS, Reason.LINK_CONGESTED_PD_P_BUSIER, mode, cache_move=move
            )
        surge = prefill_end_s - remote_prefill_s > cfg.prfaas_surge_s
        if surge and local_s < remote_s:
            return PathChoice(ServePath.PD_P, Reason.PRFAAS_QUEUE_SURGE, mode)
        return tentative
