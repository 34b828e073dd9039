"""`SchedulerConfig.can_move_cache`: the plentiful rule with and without cross-cluster moves.

The simulator carries out `CacheMove`s (default True); the live router does not yet (False).
Without moves each path restores only its own cluster's prefix, so a long prompt cached at
PrfaaS must stay on PrfaaS rather than go to PD-P cold (issue 8).
"""

from __future__ import annotations

from scheduler_fixtures import GB, THRESHOLD_TOKENS, make_config, make_view, req

from prfaas.scheduler import (
    BandwidthMode,
    CacheMove,
    GlobalScheduler,
    LinkView,
    PrfaasPolicy,
    Reason,
    RouteDecision,
    RouteRequest,
    ServePath,
)

SCARCE_LINK = LinkView(10 * GB, egress_bytes_per_s=8 * GB)


def _route(can_move: bool, request: RouteRequest, link: LinkView | None = None) -> RouteDecision:
    config = make_config(can_move_cache=can_move)
    decision = GlobalScheduler(PrfaasPolicy(config), config, THRESHOLD_TOKENS).route(
        request, make_view(link)
    )
    assert isinstance(decision, RouteDecision)
    return decision


def _summary(d: RouteDecision) -> tuple[object, ...]:
    return (d.path, d.reason, d.prefill_instance_id, d.reused_prefix_tokens, d.cache_move)


def test_moves_are_allowed_by_default() -> None:
    assert make_config().can_move_cache is True


def test_repeated_long_prompt_cached_at_prfaas() -> None:
    # t = 10K; the prompt's first send left 29,984 tokens on f0. l - max(...) = 16 <= t.
    request = req("r", 30_000, {"f0": 29_984})
    assert _summary(_route(True, request)) == (
        ServePath.PD_P,
        Reason.PLENTIFUL_SHORT_AT_PD,
        "p0",
        29_984,
        CacheMove("f0", "prfaas", "pd", 29_984),
    )
    # Without moves PD-P would compute all 30K: l - l_pd = 30K > t, so PrfaaS, reusing f0.
    d = _route(False, request)
    assert _summary(d) == (
        ServePath.PRFAAS,
        Reason.PLENTIFUL_NO_MOVE_LONG_TO_PRFAAS,
        "f0",
        29_984,
        None,
    )
    assert (d.uncached_tokens, d.mode) == (16, BandwidthMode.PLENTIFUL)


def test_long_prompt_cached_at_pd_is_computed_whole_at_prfaas_without_moves() -> None:
    request = req("r", 50_000, {"p1": 20_000})  # l - l_pd = 30K > t either way
    assert _summary(_route(True, request)) == (
        ServePath.PRFAAS,
        Reason.PLENTIFUL_LONG_TO_PRFAAS,
        "f0",
        20_000,
        CacheMove("p1", "pd", "prfaas", 20_000),
    )
    d = _route(False, request)
    assert _summary(d) == (ServePath.PRFAAS, Reason.PLENTIFUL_NO_MOVE_LONG_TO_PRFAAS, "f0", 0, None)
    assert d.uncached_tokens == 50_000


def test_prompt_short_after_pd_prefix_stays_at_pd_p_both_ways() -> None:
    request = req("r", 50_000, {"p1": 45_000, "f0": 10_000})  # l - l_pd = 5K <= t
    assert _summary(_route(True, request)) == (
        ServePath.PD_P,
        Reason.PLENTIFUL_SHORT_AT_PD,
        "p1",
        45_000,
        None,  # the longer prefix is already at PD: nothing to move
    )
    assert _summary(_route(False, request)) == (
        ServePath.PD_P,
        Reason.PLENTIFUL_NO_MOVE_SHORT_AT_PD,
        "p1",
        45_000,
        None,
    )


def test_uncached_short_prompt_goes_to_pd_p_without_moves() -> None:
    d = _route(False, req("r", 10_000))
    assert (d.path, d.reason, d.prefill_instance_id, d.uncached_tokens) == (
        ServePath.PD_P,
        Reason.PLENTIFUL_NO_MOVE_SHORT_AT_PD,
        "p0",
        10_000,
    )


def test_scarce_rule_is_the_same_with_or_without_moves() -> None:
    for request in (
        req("a", 30_000, {"p1": 25_000, "f0": 28_000}),
        req("b", 30_000, {"f1": 8_000}),
    ):
        with_moves = _route(True, request, SCARCE_LINK)
        assert _route(False, request, SCARCE_LINK) == with_moves
        assert with_moves.mode is BandwidthMode.SCARCE and with_moves.cache_move is None
    d = _route(False, req("b", 30_000, {"f1": 8_000}), SCARCE_LINK)
    assert (d.path, d.reason, d.prefill_instance_id, d.reused_prefix_tokens) == (
        ServePath.PRFAAS,
        Reason.SCARCE_LONG_TO_PRFAAS,
        "f1",
        8_000,
    )
