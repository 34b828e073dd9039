"""A modelled prefill instance runs as many prompts at once as its profile's prefill
concurrency (attention-DP ranks, issue 30), each taking its own latency, FCFS across lanes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler.decisions import Reason, RouteDecision, ServePath
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.core import EventLoop
from prfaas.sim.instances import PrefillFacet, PrefillJob


@dataclass(frozen=True)
class RankProfile:
    """One prompt of l tokens takes 1 s + l ms on one lane; `prefill_concurrency` lanes."""

    prefill_concurrency: int

    def prefill_s(self, length_tokens: int) -> float:
        return 1.0 + length_tokens / 1000


class Recorder:
    def __init__(self, loop: EventLoop) -> None:
        self.loop = loop
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}

    def prefill_started(self, job: PrefillJob, estimate_s: float) -> None:
        self.started[job.request.request_id] = self.loop.now_s

    def prefill_finished(self, job: PrefillJob) -> None:
        self.finished[job.request.request_id] = self.loop.now_s


def _run(concurrency: int, lengths: list[int], max_batch: int = 1) -> Recorder:
    loop = EventLoop()
    host = Recorder(loop)
    facet = PrefillFacet(
        loop,
        host,
        RankProfile(concurrency),  # type: ignore[arg-type]  # the facet reads prefill_s only
        pool=None,
        hash_scheme=None,
        chunk_tokens=8192,
        max_batch_requests=max_batch,
    )
    for i, length in enumerate(lengths):
        rid = RequestId(f"r{i}")
        decision = RouteDecision(
            rid, ServePath.PD_P, InstanceId("p"), InstanceId("d"), 0, length, Reason.HOMOGENEOUS
        )
        facet.enqueue(PrefillJob(SimRequest(rid, 0.0, length, 8), decision))
    loop.run()
    assert facet.busy_lanes == 0 and facet.is_idle
    return host


def test_a_dp4_instance_prefills_four_prompts_at_once() -> None:
    host = _run(4, [1000] * 5)
    assert [host.finished[f"r{i}"] for i in range(4)] == [2.0] * 4  # each its own 2 s
    assert host.started["r4"] == 2.0 and host.finished["r4"] == 4.0  # the fifth waits a lane


def test_one_lane_runs_them_one_after_another() -> None:
    host = _run(1, [1000] * 3)
    assert [host.finished[f"r{i}"] for i in range(3)] == [2.0, 4.0, 6.0]


@settings(max_examples=50, deadline=None)
@given(
    concurrency=st.integers(1, 8),
    lengths=st.lists(st.integers(1, 4000), min_size=1, max_size=20),
)
def test_lanes_serve_first_come_first_served(concurrency: int, lengths: list[int]) -> None:
    """List scheduling: each prompt starts when the earliest lane frees, in arrival order,
    and ends its own latency later; never more than `concurrency` run at once."""
    host = _run(concurrency, lengths)
    lanes = [0.0] * concurrency
    for i, length in enumerate(lengths):
        start = min(lanes)
        lanes[lanes.index(start)] = start + 1.0 + length / 1000
        assert host.started[f"r{i}"] == pytest.approx(start)
        assert host.finished[f"r{i}"] == pytest.approx(start + 1.0 + length / 1000)
