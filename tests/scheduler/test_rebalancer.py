"""The long timescale: bottleneck detection, role flips with draining, t re-optimised."""

from __future__ import annotations

import pytest
from scheduler_fixtures import inst, make_view

from prfaas.planner import load_scenario
from prfaas.planner.optimise import Stage
from prfaas.planner.scenario import RebalanceFile
from prfaas.scheduler import (
    FlipRole,
    RebalanceConfig,
    RebalancePolicy,
    RebalanceReason,
    Role,
    SetThreshold,
    StageStats,
    Window,
)
from prfaas.scheduler.rebalancer import detect_bottleneck

LINK_100G = 100e9 / 8


@pytest.fixture(scope="module")
def config() -> RebalanceConfig:
    return RebalanceConfig.of(
        load_scenario("paper-case-study").hardware, RebalanceFile(min_samples=10)
    )


def case_study_view(n_p: int, n_d: int, draining: str | None = None):  # type: ignore[no-untyped-def]
    instances = [inst(f"f{i}", Role.PRFAAS) for i in range(4)]
    instances += [inst(f"p{i}", Role.PD_PREFILL, f"p{i}" != draining) for i in range(n_p)]
    instances += [inst(f"d{i}", Role.PD_DECODE, f"d{i}" != draining) for i in range(n_d)]
    return make_view(instances=tuple(instances))


def window(lengths: list[int], output: int = 1024) -> Window:
    return Window(list(lengths), sum(lengths), output * len(lengths))


def stats(p_util: float = 0.5, d_util: float = 0.5, queue_s: float = 0.0, waiting: int = 0):  # type: ignore[no-untyped-def]
    return StageStats(p_util, d_util, queue_s, waiting, LINK_100G)


LOGNORMAL = [int(x) for x in (3_000, 8_000, 12_000, 18_000, 22_000, 30_000, 45_000, 70_000)] * 5


def test_bottleneck_detection(config: RebalanceConfig) -> None:
    assert detect_bottleneck(stats(0.95, 0.5, queue_s=20.0), config) is Stage.PD_P
    assert detect_bottleneck(stats(0.95, 0.5, queue_s=1.0), config) is None
    assert detect_bottleneck(stats(0.5, 0.95, waiting=3), config) is Stage.PD_D
    assert detect_bottleneck(stats(0.5, 0.95, waiting=0), config) is None


def test_planner_target_moves_threshold_and_flips_decode_to_prefill(
    config: RebalanceConfig,
) -> None:
    actions = RebalancePolicy(config).step(
        case_study_view(n_p=1, n_d=7), stats(0.95, 0.3, queue_s=30.0), window(LOGNORMAL), 40_000
    )
    assert isinstance(actions[0], SetThreshold)
    assert actions[0].reason is RebalanceReason.PLANNER_REOPTIMISED
    assert actions[0].threshold_tokens < 40_000
    assert actions[1] == FlipRole("d6", Role.PD_PREFILL, RebalanceReason.PREFILL_BOTTLENECK)


def test_no_flip_against_the_measured_bottleneck(config: RebalanceConfig) -> None:
    # The planner wants more PD-P, but decode is measured as the bottleneck: hold.
    actions = RebalancePolicy(config).step(
        case_study_view(n_p=1, n_d=7), stats(0.3, 0.95, waiting=5), window(LOGNORMAL), 40_000
    )
    assert not [a for a in actions if isinstance(a, FlipRole)]


def test_flip_to_decode_when_planner_wants_fewer_prefill(config: RebalanceConfig) -> None:
    actions = RebalancePolicy(config).step(
        case_study_view(n_p=6, n_d=2), stats(0.3, 0.95, waiting=5), window(LOGNORMAL), 19_600
    )
    assert FlipRole("p5", Role.PD_DECODE, RebalanceReason.DECODE_BOTTLENECK) in actions


def test_no_planner_flip_toward_a_stage_that_is_not_busy(config: RebalanceConfig) -> None:
    # No bottleneck measured: the planner's flip stands only where the stage it feeds is busy
    # (utilisation >= busy_utilisation, 0.85); a stage with room gains nothing from a drain.
    more_prefill, fewer_prefill = case_study_view(n_p=1, n_d=7), case_study_view(n_p=6, n_d=2)
    cases = (
        (more_prefill, stats(0.9, 0.3), 40_000, True),
        (fewer_prefill, stats(0.3, 0.9), 19_600, True),
        (more_prefill, stats(0.6, 0.9), 40_000, False),
        (fewer_prefill, stats(0.9, 0.11), 19_600, False),
    )
    for view, measured, t, flips in cases:
        actions = RebalancePolicy(config).step(view, measured, window(LOGNORMAL), t)
        assert any(isinstance(a, FlipRole) for a in actions) is flips


def test_one_drain_at_a_time_and_too_few_samples(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    draining = case_study_view(n_p=1, n_d=7, draining="d3")
    actions = policy.step(draining, stats(0.95, 0.3, queue_s=30.0), window(LOGNORMAL), 40_000)
    assert not [a for a in actions if isinstance(a, FlipRole)]
    assert policy.step(case_study_view(1, 7), stats(), window([1000] * 3), 40_000) == []


def test_halved_lengths_lower_the_threshold(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    _, t_full = policy.target(case_study_view(3, 5), stats(), window(LOGNORMAL))
    _, t_half = policy.target(case_study_view(3, 5), stats(), window([x // 2 for x in LOGNORMAL]))
    assert t_half < t_full


def test_small_windows_accumulate_until_min_samples() -> None:
    from scheduler_fixtures import make_config, req

    from prfaas.scheduler import GlobalScheduler, PrfaasPolicy

    hw = load_scenario("paper-case-study").hardware
    sched_config = make_config()
    scheduler = GlobalScheduler(
        PrfaasPolicy(sched_config),
        sched_config,
        20_000,
        RebalancePolicy(RebalanceConfig.of(hw, RebalanceFile(min_samples=8))),
    )
    view = case_study_view(n_p=3, n_d=5)
    for period in range(2):  # two periods of 4 requests each: too few alone, enough together
        for k in range(4):
            scheduler.route(req(f"r{period}{k}", LOGNORMAL[4 * period + k]), view)
        actions = scheduler.rebalance(view, stats(0.9, 0.9))
        if period == 0:
            assert actions == []
    # 8 lengths leave no sample between the current t and the planner's, so no predicted gain
    # moves t (damping); the flip toward the planner's N_p shows the window was judged.
    assert any(isinstance(a, FlipRole) for a in actions)
    assert scheduler.rebalance(view, stats(0.9, 0.9)) == []  # the window was consumed


#: 40 lengths from 1K to 41K, 10% apart: dense enough that t moves with N_p.
GEOMETRIC = [int(1000 * 1.1**k) for k in range(40)]


def refusing_window(
    at_decode: int, at_pd_prefill: int, at_prfaas: int = 0, output: int = 343
) -> Window:
    """40 dispatched requests (GEOMETRIC lengths; with 343-token outputs the planner wants 5
    PD-P of 8, with 200-token ones 6) and the given refusals by stage."""
    w = window(GEOMETRIC, output=output)
    w.refused_at_decode, w.refused_at_pd_prefill, w.refused_at_prfaas = (
        at_decode,
        at_pd_prefill,
        at_prfaas,
    )
    return w


def test_overload_decode_refusals_flip_pd_prefill_to_decode_and_lower_t(
    config: RebalanceConfig,
) -> None:
    # Admission refused 10 of 50 routed, 8 for a full decode batch, and the planner wants 5
    # PD-P where there are 6: decode is what is short. The new t is the planner's for the 5
    # PD-P instances left, below its t for 6, moved at most a factor 1.25 per period (damping).
    policy = RebalancePolicy(config)
    view = case_study_view(n_p=6, n_d=2)
    busy = stats(0.97, 0.7)
    actions = policy.step(view, busy, refusing_window(8, 2), 19_600)
    assert FlipRole("p5", Role.PD_DECODE, RebalanceReason.DECODE_BOTTLENECK) in actions
    [new_t] = [a.threshold_tokens for a in actions if isinstance(a, SetThreshold)]
    dispatched = window(GEOMETRIC, output=343)
    target = policy.target(view, busy, dispatched, n_p=5)[1]
    assert target < policy.target(view, busy, dispatched, n_p=6)[1]
    assert new_t == max(target, round(19_600 / (1 + config.max_threshold_step_fraction)))
    assert new_t < 19_600


def test_overload_refusals_never_flip_against_the_planners_n_p(config: RebalanceConfig) -> None:
    # Decode refuses 8 of 50, but the planner wants 5 PD-P where there are 4: flipping a
    # fifth PD-P instance to decode would starve prefill further (a prefix-heavy trace lost
    # 74 requests in SLO to such a flip), so nothing flips.
    policy = RebalancePolicy(config)
    assert policy.target(case_study_view(4, 4), stats(), window(GEOMETRIC, output=343))[0] == 5
    actions = policy.step(case_study_view(4, 4), stats(0.97, 0.7), refusing_window(8, 2), 19_600)
    # Nor does t move: in overload the steady-state model's t is followed only with a flip
    # (moves without one cost 1.3% of the requests in SLO on the conversation slice at x0.22).
    assert actions == []


def test_overload_refusals_at_prfaas_or_balanced_flip_nothing(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    view = case_study_view(n_p=6, n_d=2)
    for refusals in [(0, 0, 20), (6, 5, 0), (2, 1, 10)]:
        actions = policy.step(view, stats(0.97, 0.97), refusing_window(*refusals), 19_600)
        assert not [a for a in actions if isinstance(a, FlipRole)], refusals


def test_overload_flip_is_undone_only_past_the_hysteresis(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    first = policy.step(case_study_view(6, 2), stats(), refusing_window(8, 0), 19_600)
    assert any(isinstance(a, FlipRole) for a in first)  # decode refused 8 of 48 routed
    after = case_study_view(n_p=5, n_d=3)
    # The mix changed (shorter outputs: the planner now wants 6 PD-P). PD-P refuses 9 of 49
    # (18%): more than decode did (17%), less than twice: hold.
    held = policy.step(after, stats(), refusing_window(0, 9, output=200), 19_600)
    assert not [a for a in held if isinstance(a, FlipRole)]
    # 20 of 60 (33%) is past twice 17%: the flip did not pay, undo it.
    undone = policy.step(after, stats(), refusing_window(0, 20, output=200), 19_600)
    assert FlipRole("d2", Role.PD_PREFILL, RebalanceReason.PREFILL_BOTTLENECK) in undone


def test_below_the_overload_fraction_the_planner_decides(config: RebalanceConfig) -> None:
    # 1 refusal in 41 routed (2.4%) is not overload: the planner's flip toward prefill stands.
    actions = RebalancePolicy(config).step(
        case_study_view(n_p=1, n_d=7), stats(0.95, 0.3, queue_s=30.0), refusing_window(1, 0), 40_000
    )
    assert FlipRole("d6", Role.PD_PREFILL, RebalanceReason.PREFILL_BOTTLENECK) in actions


def test_scheduler_counts_admission_refusals_by_stage() -> None:
    import math

    from scheduler_fixtures import THRESHOLD_TOKENS, make_config, req

    from prfaas.kvcache.ids import InstanceId, RequestId
    from prfaas.scheduler import (
        AdmissionConfig,
        AdmissionMode,
        AdmissionPolicy,
        GlobalScheduler,
        PrfaasPolicy,
        Rejection,
    )

    hw = load_scenario("paper-case-study").hardware
    sched_config = make_config(burst_enter_s=math.inf)
    admission = AdmissionPolicy(AdmissionConfig(AdmissionMode.SHED, ttft_slo_s=2.0))
    scheduler = GlobalScheduler(
        PrfaasPolicy(sched_config),
        sched_config,
        THRESHOLD_TOKENS,
        RebalancePolicy(RebalanceConfig.of(hw, RebalanceFile(min_samples=1))),
        admission,
    )
    view = case_study_view(n_p=1, n_d=1)
    # 10 s of prefill queued on PD-P: a short prompt is refused on its predicted TTFT there.
    scheduler.ledger.dispatch(RequestId("q"), InstanceId("p0"), 10.0, InstanceId("x"), 0)
    assert isinstance(scheduler.route(req("short", 2_000), view), Rejection)
    # The decode instance holds BS_max (8) requests past prefill: the next one is refused there.
    for k in range(8):
        scheduler.ledger.dispatch(RequestId(f"d{k}"), InstanceId("f0"), 0.1, InstanceId("d0"), 0)
        scheduler.ledger.prefill_done(RequestId(f"d{k}"))
    assert isinstance(scheduler.route(req("long", 40_000), view), Rejection)
    w = scheduler._window
    assert (w.refused_at_decode, w.refused_at_pd_prefill, w.refused_at_prfaas) == (1, 1, 0)
    assert w.refused_fraction == 1.0 and w.uncached_tokens == []
