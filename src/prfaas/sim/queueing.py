"""Textbook queueing stations on the event core, for validation and as a speed yardstick.

`MultiServerStation` is an FCFS station with c identical servers (M/M/c when fed Poisson
arrivals and exponential service). `run_mmc` measures its mean wait, which the tests hold to
the Erlang-C closed form; `run_tandem` chains stations the way a request crosses prefill, the
link and decode, the same network the SimPy yardstick of benchmarks/sim_bench.py builds.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from prfaas.sim.core import EventLoop, EventPriority


@dataclass(slots=True)
class _Job:
    job_id: int
    arrival_s: float
    service_s: tuple[float, ...]
    stage: int = 0
    wait_s: float = 0.0


class MultiServerStation:
    def __init__(self, loop: EventLoop, num_servers: int, done: Callable[[_Job], None]) -> None:
        self.loop = loop
        self.num_free = num_servers
        self.queue: deque[tuple[float, _Job]] = deque()
        self.done = done

    def arrive(self, job: _Job) -> None:
        if self.num_free:
            self.num_free -= 1
            self._start(job)
        else:
            self.queue.append((self.loop.now_s, job))

    def _start(self, job: _Job) -> None:
        self.loop.schedule(
            self.loop.now_s + job.service_s[job.stage], EventPriority.COMPLETION, self._finish, job
        )

    def _finish(self, job: _Job) -> None:
        if self.queue:
            queued_at, waiting = self.queue.popleft()
            waiting.wait_s += self.loop.now_s - queued_at
            self._start(waiting)
        else:
            self.num_free += 1
        self.done(job)


def erlang_c_wait_s(arrival_rate: float, service_rate: float, num_servers: int) -> float:
    """Mean wait in queue of M/M/c: C(c, a) / (c mu - lambda), a = lambda / mu."""
    a = arrival_rate / service_rate
    rho = a / num_servers
    if rho >= 1:
        raise ValueError("unstable: utilisation >= 1")
    head = sum(a**k / math.factorial(k) for k in range(num_servers))
    tail = a**num_servers / (math.factorial(num_servers) * (1 - rho))
    return tail / (head + tail) / (num_servers * service_rate - arrival_rate)


@dataclass(frozen=True, slots=True)
class TandemResult:
    mean_wait_s: float
    num_jobs: int
    num_events: int


def run_tandem(
    interarrival_s: Sequence[float],
    service_s: Sequence[Sequence[float]],
    servers: Sequence[int],
) -> TandemResult:
    """Jobs through stations in order; `service_s[i][k]` is job i's service at station k."""
    loop = EventLoop()
    waits: list[float] = []
    stations: list[MultiServerStation] = []

    def forward(job: _Job) -> None:
        job.stage += 1
        if job.stage < len(stations):
            stations[job.stage].arrive(job)
        else:
            waits.append(job.wait_s)

    stations.extend(MultiServerStation(loop, c, forward) for c in servers)
    now = 0.0
    for i, (gap, service) in enumerate(zip(interarrival_s, service_s, strict=True)):
        now += gap
        loop.schedule(now, EventPriority.ARRIVAL, stations[0].arrive, _Job(i, now, tuple(service)))
    loop.run()
    return TandemResult(float(np.mean(waits)), len(waits), loop.num_events)


def run_mmc(
    arrival_rate: float, service_rate: float, num_servers: int, num_jobs: int, seed: int
) -> TandemResult:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / arrival_rate, num_jobs).tolist()
    service = rng.exponential(1 / service_rate, (num_jobs, 1)).tolist()
    return run_tandem(gaps, service, [num_servers])
