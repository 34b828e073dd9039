"""The work-conserving burst rule: short requests overflow to PrfaaS only when PD-P's queue
wait exceeds their whole PrfaaS finish, with hysteresis, never on a scarce link."""

from __future__ import annotations

import contextlib

from scheduler_fixtures import GB, THRESHOLD_TOKENS, make_config, make_view, req

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import (
    GlobalScheduler,
    LinkView,
    PrfaasPolicy,
    Reason,
    RouteDecision,
    ServePath,
)

SHORT = 5_000  # <= t (10K): PrfaaS prefill 0.15 s, KV 5 MB (0.5 ms at 10 GB/s)


def scheduler() -> GlobalScheduler:
    config = make_config(burst_enter_s=2.0, burst_leave_s=0.5)
    return GlobalScheduler(PrfaasPolicy(config), config, THRESHOLD_TOKENS)


def set_pd_p_wait(s: GlobalScheduler, wait_s: float) -> None:
    """Both PD-P instances hold exactly `wait_s` of queued prefill."""
    for name in ("p0", "p1"):
        rid = RequestId(f"fill-{name}")
        with contextlib.suppress(KeyError):  # the previous fill, if any
            s.ledger.decode_done(rid)
        s.ledger.dispatch(rid, InstanceId(name), wait_s, InstanceId("d1"), 0)


def route(s: GlobalScheduler, name: str, link: LinkView | None = None) -> RouteDecision:
    decision = s.route(req(name, SHORT), make_view(link))
    assert isinstance(decision, RouteDecision)
    s.ledger.decode_done(decision.request_id)  # keep the queues as set
    return decision


def test_normal_load_keeps_short_requests_at_pd_p() -> None:
    s = scheduler()
    for wait_s in (0.0, 1.0, 2.1):  # 2.1 - 0.15 = 1.95 <= 2: not yet
        set_pd_p_wait(s, wait_s)
        d = route(s, f"r{wait_s}")
        assert (d.path, d.reason) == (ServePath.PD_P, Reason.PLENTIFUL_SHORT_AT_PD)


def test_overflow_enters_and_leaves_with_hysteresis() -> None:
    s = scheduler()
    set_pd_p_wait(s, 3.0)  # excess 2.85 > 2: enter
    d = route(s, "a")
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.BURST_SHORT_TO_PRFAAS)
    set_pd_p_wait(s, 1.5)  # excess 1.35: below enter, above leave: stays on
    assert route(s, "b").reason is Reason.BURST_SHORT_TO_PRFAAS
    set_pd_p_wait(s, 0.6)  # excess 0.45 <= 0.5: leaves
    assert route(s, "c").path is ServePath.PD_P
    set_pd_p_wait(s, 1.5)  # off again, and 1.35 does not re-enter
    assert route(s, "d").path is ServePath.PD_P


def test_link_backlog_counts_against_overflow() -> None:
    s = scheduler()
    set_pd_p_wait(s, 3.0)
    backlog = LinkView(10 * GB, bytes_waiting=25 * GB)  # 2.5 s to drain: excess 0.5
    assert route(s, "r", backlog).path is ServePath.PD_P


def test_no_overflow_on_a_scarce_link() -> None:
    s = scheduler()
    set_pd_p_wait(s, 30.0)
    scarce = LinkView(10 * GB, egress_bytes_per_s=8 * GB)
    d = route(s, "r", scarce)
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.SCARCE_SHORT_AT_PD)
