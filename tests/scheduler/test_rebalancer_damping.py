"""The damped slow loop (issue 27): t moves at most a factor per period, a reversal needs a
larger change than a continuation (hysteresis), and no move without a predicted gain above the
window's own noise."""

from __future__ import annotations

import random

import pytest
from test_rebalancer import GEOMETRIC, case_study_view, refusing_window, stats, window

from prfaas.planner import load_scenario
from prfaas.planner.scenario import RebalanceFile
from prfaas.scheduler import RebalanceConfig, RebalancePolicy, SetThreshold
from prfaas.scheduler.decisions import RebalanceAction


@pytest.fixture(scope="module")
def config() -> RebalanceConfig:
    return RebalanceConfig.of(
        load_scenario("paper-case-study").hardware, RebalanceFile(min_samples=10)
    )


def _settled(policy: RebalancePolicy):  # type: ignore[no-untyped-def]
    """A case-study view at the planner's own N_p for the test window (so no flip), the
    window, and the planner's t there."""
    lengths = window(GEOMETRIC * 10, output=343)  # 400 lengths: the planner's t is sure
    n_p, _ = policy.target(case_study_view(n_p=3, n_d=5), stats(), lengths)
    view = case_study_view(n_p=n_p, n_d=8 - n_p)
    return view, lengths, policy.target(view, stats(), lengths, n_p=n_p)[1]


def _threshold(actions: list[RebalanceAction]) -> int | None:
    moves = [a.threshold_tokens for a in actions if isinstance(a, SetThreshold)]
    return moves[0] if moves else None


def test_a_far_target_is_reached_a_bounded_step_per_period(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    busy = stats(0.9)  # PD-P busy: outside overload the loop acts only then
    view, lengths, target = _settled(policy)
    current = 4 * target  # far above it
    steps = []
    for _ in range(12):
        new_t = _threshold(policy.step(view, busy, lengths, current))
        if new_t is None:
            break
        assert new_t >= round(current / (1 + config.max_threshold_step_fraction))
        steps.append(new_t)
        current = new_t
    assert len(steps) >= 5  # 4x takes at least ln 4 / ln 1.25 = 6.2 periods
    assert steps == sorted(steps, reverse=True)
    # It stops where the predicted gain of going on is within 1% (Lambda_max is flat there).
    assert target <= current <= 1.5 * target


def test_a_small_reversal_is_held(config: RebalanceConfig) -> None:
    policy = RebalancePolicy(config)
    busy = stats(0.9)  # PD-P busy: outside overload the loop acts only then
    view, lengths, target = _settled(policy)
    assert _threshold(policy.step(view, busy, lengths, round(target * 1.2))) == target  # down
    # Now 14% below the target (Lambda_max 3.7% lower there): going back up reverses the last
    # move, and 14% is under reversal_change.
    assert config.min_threshold_change < 0.14 < config.reversal_change
    assert _threshold(policy.step(view, busy, lengths, round(target / 1.14))) is None
    fresh = RebalancePolicy(config)  # without the previous move, the same change is taken
    assert _threshold(fresh.step(view, busy, lengths, round(target / 1.14))) == target


def test_no_move_when_the_gain_is_within_the_windows_noise(config: RebalanceConfig) -> None:
    # 20 lengths spread over 1K-128K: the halves of the window disagree about the best t more
    # than the planner's predicted gain, so t stays where it is.
    rng = random.Random(7)
    lengths = [int(1000 * 128 ** rng.random()) for _ in range(20)]
    policy = RebalancePolicy(config)
    view, busy = case_study_view(n_p=3, n_d=5), stats(0.9)
    _, target = policy.target(view, busy, window(lengths, output=343), n_p=3)
    current = round(target * 1.3)
    assert _threshold(policy.step(view, busy, window(lengths, output=343), current)) is None


def test_a_cluster_with_no_busy_stage_holds(config: RebalanceConfig) -> None:
    # The same far target as above: with neither PD stage busy nothing is short, so a move for
    # capacity buys nothing now and lags when the mix shifts back (module docstring).
    view, lengths, target = _settled(RebalancePolicy(config))
    assert RebalancePolicy(config).step(view, stats(0.6, 0.6), lengths, 4 * target) == []
    assert _threshold(RebalancePolicy(config).step(view, stats(0.6, 0.9), lengths, 4 * target))


def test_overload_refusals_move_t_toward_the_planner_only_to_relieve_the_refusing_side(
    config: RebalanceConfig,
) -> None:
    # 20 of 60 routed refused, no flip (decode refuses nothing). PrfaaS refusing: t goes up
    # (fewer requests to PrfaaS) where the planner's t is higher, bounded per period; not where
    # it is lower. PD-P refusing: the mirror.
    view, _, target = _settled(RebalancePolicy(config))
    low, high = round(target / 2), 2 * target
    at_prfaas, at_pd_p = refusing_window(0, 0, 20), refusing_window(0, 20, 0)
    for w, current, moved in (
        (at_prfaas, low, True),
        (at_prfaas, high, False),
        (at_pd_p, high, True),
        (at_pd_p, low, False),
    ):
        new_t = _threshold(RebalancePolicy(config).step(view, stats(0.97, 0.5), w, current))
        if moved:
            assert new_t is not None and abs(new_t - current) <= 0.25 * current + 1
            assert (new_t - current) * (target - current) > 0
        else:
            assert new_t is None
