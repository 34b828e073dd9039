"""Fair sharing, rate caps (layer-wise pipelining), capacity steps and RTT on the link."""

from __future__ import annotations

import pytest

from prfaas.sim.core import EventLoop, EventPriority
from prfaas.sim.link import FairShareLink


def test_two_flows_share_then_one_speeds_up() -> None:
    loop = EventLoop()
    link = FairShareLink(loop, capacity_bytes_per_s=100.0, rtt_s=0.2)
    done: dict[str, float] = {}
    link.send(100.0, float("inf"), lambda name: done.__setitem__(name, loop.now_s), "a")
    link.send(300.0, float("inf"), lambda name: done.__setitem__(name, loop.now_s), "b")
    loop.run()
    # Both at 50 B/s until a finishes at 2 s; b then has 200 B left at 100 B/s: 4 s. + RTT/2.
    assert done == pytest.approx({"a": 2.1, "b": 4.1})
    assert link.delivered_bytes == pytest.approx(400.0)


def test_capped_flow_leaves_the_rest_to_others_until_lifted() -> None:
    loop = EventLoop()
    link = FairShareLink(loop, 100.0, 0.0)
    done: dict[str, float] = {}
    slow = link.send(100.0, 10.0, lambda n: done.__setitem__(n, loop.now_s), "capped")
    link.send(180.0, float("inf"), lambda n: done.__setitem__(n, loop.now_s), "free")
    loop.schedule(5.0, EventPriority.COMPLETION, lambda _: link.lift_cap(slow), None)
    loop.run()
    # free: 90 B/s -> done at 2 s; capped: 10 B/s alone until 5 s (50 B), then 100 B/s: 5.5 s.
    assert done == pytest.approx({"free": 2.0, "capped": 5.5})


def test_capacity_drop_stretches_a_transfer() -> None:
    loop = EventLoop()
    link = FairShareLink(loop, 100.0, 0.0)
    done: list[float] = []
    link.send(300.0, float("inf"), lambda _: done.append(loop.now_s), None)
    loop.schedule(1.0, EventPriority.CAPACITY, lambda _: link.set_capacity(10.0), None)
    loop.run()
    assert done == pytest.approx([1.0 + 200.0 / 10.0])


def test_connection_limit_bounds_usable_capacity() -> None:
    loop = EventLoop()
    link = FairShareLink(loop, 100.0, 0.0, connection_limit_bytes_per_s=40.0)
    assert link.capacity_bytes_per_s == 40.0
