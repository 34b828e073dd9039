"""Every routing rule of PrfaasPolicy with the exact decision and reason."""

from __future__ import annotations

from scheduler_fixtures import GB, THRESHOLD_TOKENS, inst, make_config, make_view, req

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import (
    BandwidthConfig,
    BandwidthMode,
    CacheMove,
    GlobalScheduler,
    LinkView,
    PrfaasPolicy,
    Reason,
    Rejection,
    RejectReason,
    Role,
    RouteDecision,
    ServePath,
)


def scheduler(**kwargs: object) -> GlobalScheduler:
    config = make_config(**kwargs)
    return GlobalScheduler(PrfaasPolicy(config), config, THRESHOLD_TOKENS)


SCARCE_LINK = LinkView(10 * GB, egress_bytes_per_s=8 * GB)


def route(s: GlobalScheduler, request, view=None) -> RouteDecision:  # type: ignore[no-untyped-def]
    decision = s.route(request, view or make_view())
    assert isinstance(decision, RouteDecision)
    return decision


def test_short_uncached_goes_to_pd_p() -> None:
    d = route(scheduler(), req("r", 10_000))
    assert (d.path, d.reason, d.mode) == (
        ServePath.PD_P,
        Reason.PLENTIFUL_SHORT_AT_PD,
        BandwidthMode.PLENTIFUL,
    )
    assert (d.prefill_instance_id, d.decode_instance_id, d.uncached_tokens) == ("p0", "d0", 10_000)


def test_long_uncached_goes_to_prfaas() -> None:
    d = route(scheduler(), req("r", 10_001))
    assert (d.path, d.reason, d.prefill_instance_id) == (
        ServePath.PRFAAS,
        Reason.PLENTIFUL_LONG_TO_PRFAAS,
        "f0",
    )
    assert d.cache_move is None


def test_scarce_judges_pd_cache_alone() -> None:
    # l_total - l_pd = 30K - 25K = 5K <= t: PD-P, even though PrfaaS holds more.
    d = route(scheduler(), req("r", 30_000, {"p1": 25_000, "f0": 28_000}), make_view(SCARCE_LINK))
    assert (d.path, d.reason, d.mode) == (
        ServePath.PD_P,
        Reason.SCARCE_SHORT_AT_PD,
        BandwidthMode.SCARCE,
    )
    assert (d.prefill_instance_id, d.reused_prefix_tokens, d.cache_move) == ("p1", 25_000, None)


def test_scarce_long_after_pd_prefix_goes_remote_without_move() -> None:
    # l_total - l_pd = 30K - 5K > t: PrfaaS, using PrfaaS's own 8K prefix only.
    d = route(scheduler(), req("r", 30_000, {"p0": 5_000, "f1": 8_000}), make_view(SCARCE_LINK))
    assert (d.path, d.reason, d.prefill_instance_id) == (
        ServePath.PRFAAS,
        Reason.SCARCE_LONG_TO_PRFAAS,
        "f1",
    )
    assert (d.reused_prefix_tokens, d.uncached_tokens, d.cache_move) == (8_000, 22_000, None)


def test_plentiful_uses_longer_prefix_and_moves_it_to_pd() -> None:
    # max(l_prfaas, l_pd) = 25K in PrfaaS; 30K - 25K <= t: PD-P, moving the prefix across.
    d = route(scheduler(), req("r", 30_000, {"f0": 25_000, "p0": 2_000}))
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.PLENTIFUL_SHORT_AT_PD)
    assert d.cache_move == CacheMove("f0", "prfaas", "pd", 25_000)
    assert (d.reused_prefix_tokens, d.uncached_tokens) == (25_000, 5_000)


def test_plentiful_long_moves_pd_prefix_to_prfaas() -> None:
    d = route(scheduler(), req("r", 50_000, {"p1": 20_000}))
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.PLENTIFUL_LONG_TO_PRFAAS)
    assert d.cache_move == CacheMove("p1", "pd", "prfaas", 20_000)
    assert d.uncached_tokens == 30_000


def test_link_congestion_keeps_long_request_local() -> None:
    # 100 MB waiting on a 10 MB/s link: the KV would lag prefill by ~10 s > 2 s.
    link = LinkView(10e6, egress_bytes_per_s=1e6, bytes_waiting=100e6)
    d = route(scheduler(), req("r", 20_000), make_view(link))
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.LINK_CONGESTED)


def test_link_congestion_holds_at_prfaas_when_pd_p_is_further_behind() -> None:
    # Same congested link (KV across in ~12 s), but both PD-P instances hold 20 s of work:
    # diverting would only overload PD-P, so the request stays on the PrfaaS path.
    s = scheduler()
    for name in ("p0", "p1"):
        s.ledger.dispatch(RequestId(f"q{name}"), InstanceId(name), 20.0, InstanceId("d0"), 0.0)
    link = LinkView(10e6, egress_bytes_per_s=1e6, bytes_waiting=100e6)
    d = route(s, req("r", 20_000), make_view(link))
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.LINK_CONGESTED_PD_P_BUSIER)


def test_prfaas_queue_surge_reroutes_when_pd_p_is_sooner() -> None:
    s = scheduler(prfaas_surge_s=1.0)
    for name in ("f0", "f1"):  # 6 s of PrfaaS work queued on each instance
        s.ledger.dispatch(RequestId(f"q{name}"), InstanceId(name), 6.0, InstanceId("d0"), 0.0)
    d = route(s, req("r", 12_000))  # PD-P: 0.68 s; PrfaaS: 6 s + 0.22 s
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.PRFAAS_QUEUE_SURGE)


def test_no_prfaas_instance_falls_back_to_pd_p() -> None:
    view = make_view(instances=(inst("p0", Role.PD_PREFILL), inst("d0", Role.PD_DECODE)))
    d = route(scheduler(), req("r", 50_000), view)
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.NO_PRFAAS_INSTANCE)


def test_no_pd_prefill_instance_falls_back_to_prfaas() -> None:
    view = make_view(instances=(inst("f0", Role.PRFAAS), inst("d0", Role.PD_DECODE)))
    d = route(scheduler(), req("r", 500), view)
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.NO_PD_PREFILL_INSTANCE)


def test_no_decode_instance_rejects() -> None:
    view = make_view(instances=(inst("f0", Role.PRFAAS), inst("p0", Role.PD_PREFILL)))
    d = scheduler().route(req("r", 500), view)
    assert d == Rejection("r", RejectReason.NO_DECODE_INSTANCE)


def test_draining_instances_take_no_work() -> None:
    view = make_view(
        instances=(
            inst("p0", Role.PD_PREFILL, accepting=False),
            inst("p1", Role.PD_PREFILL),
            inst("d0", Role.PD_DECODE, accepting=False),
            inst("d1", Role.PD_DECODE),
        )
    )
    d = route(scheduler(), req("r", 500), view)
    assert (d.prefill_instance_id, d.decode_instance_id) == ("p1", "d1")


def test_mode_switch_has_hysteresis() -> None:
    s = scheduler(bandwidth=BandwidthConfig(enter_scarce=0.7, leave_scarce=0.5))
    modes = []
    for util in (0.6, 0.75, 0.6, 0.55, 0.5, 0.6):
        link = LinkView(10 * GB, egress_bytes_per_s=util * 10 * GB)
        modes.append(route(s, req(f"r{util}-{len(modes)}", 100), make_view(link)).mode)
    P, S = BandwidthMode.PLENTIFUL, BandwidthMode.SCARCE
    assert modes == [P, S, S, S, P, P]


def test_backlog_and_retransmissions_raise_pressure() -> None:
    s = scheduler()
    link = LinkView(10 * GB, egress_bytes_per_s=1 * GB, bytes_waiting=8 * GB)  # 0.8 s backlog
    assert route(s, req("a", 100), make_view(link)).mode is BandwidthMode.SCARCE
    s = scheduler()
    link = LinkView(10 * GB, egress_bytes_per_s=1 * GB, retransmit_fraction=0.02)
    assert route(s, req("b", 100), make_view(link)).mode is BandwidthMode.SCARCE


def test_prfaas_queue_below_surge_keeps_offloading() -> None:
    s = scheduler(prfaas_surge_s=10.0)
    for name in ("f0", "f1"):
        s.ledger.dispatch(RequestId(f"q{name}"), InstanceId(name), 6.0, InstanceId("d0"), 0.0)
    d = route(s, req("r", 12_000))
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.PLENTIFUL_LONG_TO_PRFAAS)
