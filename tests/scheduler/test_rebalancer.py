"""The long timescale: bottleneck detection, role flips with draining, t re-optimised."""

from __future__ import annotations

import pytest
from scheduler_fixtures import inst, make_view

from prfaas.planner import load_scenario
from prfaas.planner.optimise import Stage
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
    return RebalanceConfig(load_scenario("paper-case-study").hardware, min_samples=10)


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
    sched_config = make_config(threshold_tokens=20_000)
    scheduler = GlobalScheduler(
        PrfaasPolicy(sched_config),
        sched_config,
        RebalancePolicy(RebalanceConfig(hw, min_samples=8)),
    )
    view = case_study_view(n_p=3, n_d=5)
    for period in range(2):  # two periods of 4 requests each: too few alone, enough together
        for k in range(4):
            scheduler.route(req(f"r{period}{k}", LOGNORMAL[4 * period + k]), view)
        actions = scheduler.rebalance(view, stats())
        if period == 0:
            assert actions == []
    assert any(isinstance(a, SetThreshold) for a in actions)
    assert scheduler.rebalance(view, stats()) == []  # the window was consumed
