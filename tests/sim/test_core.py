"""The event core: (time, priority, seq) ordering, and M/M/c against Erlang C."""

from __future__ import annotations

import pytest

from prfaas.sim.core import EventLoop, EventPriority
from prfaas.sim.queueing import erlang_c_wait_s, run_mmc, run_tandem


def test_simultaneous_events_order_by_priority_then_schedule_order() -> None:
    loop = EventLoop()
    seen: list[str] = []
    loop.schedule(1.0, EventPriority.CONTROL, seen.append, "control")
    loop.schedule(1.0, EventPriority.ARRIVAL, seen.append, "arrival-a")
    loop.schedule(1.0, EventPriority.COMPLETION, seen.append, "completion")
    loop.schedule(1.0, EventPriority.ARRIVAL, seen.append, "arrival-b")
    loop.schedule(1.0, EventPriority.CAPACITY, seen.append, "capacity")
    loop.schedule(0.5, EventPriority.CONTROL, seen.append, "earlier")
    loop.run()
    assert seen == ["earlier", "capacity", "completion", "arrival-a", "arrival-b", "control"]
    assert (loop.now_s, loop.num_events) == (1.0, 6)


def test_run_until_stops_and_past_events_are_refused() -> None:
    loop = EventLoop()
    seen: list[float] = []
    for t in (1.0, 2.0, 3.0):
        loop.schedule(t, EventPriority.ARRIVAL, seen.append, t)
    loop.run(until_s=2.0)
    assert seen == [1.0, 2.0] and len(loop) == 1
    with pytest.raises(ValueError, match="in the past"):
        loop.schedule(1.5, EventPriority.ARRIVAL, seen.append, 1.5)


@pytest.mark.parametrize(("lam", "mu", "c"), [(1.4, 1.0, 2), (2.4, 1.0, 3)])
def test_mmc_mean_wait_matches_erlang_c(lam: float, mu: float, c: int) -> None:
    result = run_mmc(lam, mu, c, num_jobs=200_000, seed=7)
    assert result.mean_wait_s == pytest.approx(erlang_c_wait_s(lam, mu, c), rel=0.03)


def test_tandem_is_deterministic() -> None:
    a = run_tandem([1.0, 0.1, 0.1], [[2.0, 1.0], [2.0, 1.0], [0.5, 3.0]], [1, 1])
    # job0: s1 1..3, s2 3..4; job1 waits 1.9 at s1 (3..5), s2 5..6; job2 waits 3.8 at s1
    # (5..5.5), then 0.5 at s2 (6..9).
    assert a.mean_wait_s == pytest.approx((0 + 1.9 + 3.8 + 0.5) / 3)
    assert a.num_events == 9
