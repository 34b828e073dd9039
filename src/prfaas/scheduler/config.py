"""The scheduler's one frozen configuration: every trigger with its default.

docs/scheduler.md gives each default its reason; the numbers below are ours (the paper gives
none, section 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.specs.perf import PerfProfile


@dataclass(frozen=True, slots=True)
class BandwidthConfig:
    """Hysteresis of the scarce / plentiful switch and the congestion gate.

    pressure = max(egress utilisation, backlog_s / backlog_target_s,
                   retransmit_fraction / retransmit_target)
    enters SCARCE at pressure >= enter_scarce, leaves it at pressure <= leave_scarce.
    """

    enter_scarce: float = 0.7
    leave_scarce: float = 0.5
    backlog_target_s: float = 1.0
    retransmit_target: float = 0.01
    max_transfer_lag_s: float = 2.0  # congestion gate: predicted KV lag behind prefill end
    start_mode_scarce: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.leave_scarce < self.enter_scarce:
            raise ValueError("need 0 < leave_scarce < enter_scarce for hysteresis")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Timing models to estimate work and the short-timescale triggers.

    `load_slack`: bounded-load factor epsilon: cache affinity may pick an instance only if it
    finishes the request within (1 + epsilon) of the earliest possible finish (so affinity never
    piles requests onto a hot instance).
    `prfaas_surge_s`: PrfaaS queued work (s) above which a long request goes to PD-P if PD-P
    would finish it sooner. `dynamo_busy_s`: the Dynamo baseline's "prefill queue busy" bound.
    `burst_enter_s` / `burst_leave_s`: the work-conserving rule for short requests (below t):
    it starts sending them to PrfaaS when PD-P's queue wait exceeds, by more than
    `burst_enter_s`, their whole finish at PrfaaS (queue + prefill, or the KV across the link
    at the measured rate and backlog, whichever is later), and stops when the excess falls to
    `burst_leave_s` (hysteresis); never on a scarce link. `burst_enter_s` = inf turns it off.
    `can_move_cache`: whether the host carries out `CacheMove`s (the simulator does; the live
    router does not yet). When False the plentiful rule judges each path by the prefix its own
    cluster holds, exactly as the scarce rule does, and no decision carries a move.
    `pd_decode_profile`: the PD-D instances' timing where their shape is not the PD-P one
    (a plan with a shape per PD role); None: `pd_profile` times decode too.
    """

    prfaas_profile: PerfProfile | None
    pd_profile: PerfProfile
    bandwidth: BandwidthConfig = BandwidthConfig()
    load_slack: float = 0.25
    prfaas_surge_s: float = 10.0
    dynamo_busy_s: float = 10.0
    burst_enter_s: float = 2.0
    burst_leave_s: float = 0.0
    can_move_cache: bool = True
    pd_decode_profile: PerfProfile | None = None

    def _profile(self, on_prfaas: bool) -> PerfProfile:
        return self.prfaas_profile if on_prfaas and self.prfaas_profile else self.pd_profile

    def prefill_s(self, on_prfaas: bool, uncached_tokens: int) -> float:
        """Estimated prefill latency of `uncached_tokens` on either cluster's chips: how long
        the request itself takes once it starts."""
        return self._profile(on_prfaas).prefill_s(max(1, uncached_tokens))

    def prefill_work_s(self, on_prfaas: bool, uncached_tokens: int) -> float:
        """The instance time the request occupies, what the ledger queues: its latency over
        the prompts the instance prefills at once (`PerfProfile.prefill_concurrency`), so an
        instance's queued work is the wait before a request starts, as for one at a time."""
        profile = self._profile(on_prfaas)
        return self.prefill_s(on_prfaas, uncached_tokens) / profile.prefill_concurrency

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        """One decode step of `batch_size` requests at `context_tokens` on a PD-D instance."""
        profile = self.pd_decode_profile or self.pd_profile
        return profile.decode_step_s(batch_size, max(1, context_tokens))

    def kv_bytes(self, tokens: int) -> float:
        """KV + state bytes of a `tokens`-long context (the same model on both clusters)."""
        return self.pd_profile.cache_bytes(max(1, tokens))
