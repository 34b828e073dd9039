"""Timelines sampled every `sample_period_s`: link capacity, egress and backlog, queue depths
per role, the threshold and the P/D split. They make link drops and traffic shifts visible."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prfaas.scheduler import Role

if TYPE_CHECKING:
    from prfaas.sim.runner import Simulator

GBPS = 1e9 / 8


@dataclass(slots=True)
class Timeline:
    time_s: list[float] = field(default_factory=list)
    link_capacity_gbps: list[float] = field(default_factory=list)
    link_egress_gbps: list[float] = field(default_factory=list)
    link_backlog_gb: list[float] = field(default_factory=list)
    prfaas_queue: list[int] = field(default_factory=list)
    pd_prefill_queue: list[int] = field(default_factory=list)
    decode_waiting: list[int] = field(default_factory=list)
    decode_running: list[int] = field(default_factory=list)
    threshold_tokens: list[int] = field(default_factory=list)
    num_pd_prefill: list[int] = field(default_factory=list)
    num_pd_decode: list[int] = field(default_factory=list)
    num_completed: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {name: list(getattr(self, name)) for name in self.__slots__}


class TimelineSampler:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.timeline = Timeline()
        self._last_s = 0.0
        self._last_bytes = 0.0

    def sample(self) -> None:
        sim, tl = self.sim, self.timeline
        now = sim.loop.now_s
        link = sim.link
        _ = link.bytes_waiting  # settles progress up to now
        delivered = link.delivered_bytes
        dt = now - self._last_s
        egress = (delivered - self._last_bytes) / dt / GBPS if dt > 0 else 0.0
        self._last_s, self._last_bytes = now, delivered
        queues = {Role.PRFAAS: 0, Role.PD_PREFILL: 0}
        waiting = running = n_p = n_d = 0
        for inst in sim.instances:
            if inst.role in queues:
                queues[inst.role] += len(inst.prefill.queue)
            waiting += len(inst.decode.waiting)
            running += len(inst.decode.running)
            n_p += inst.role is Role.PD_PREFILL
            n_d += inst.role is Role.PD_DECODE
        tl.time_s.append(now)
        tl.link_capacity_gbps.append(link.capacity_bytes_per_s / GBPS)
        tl.link_egress_gbps.append(egress)
        tl.link_backlog_gb.append(link.bytes_waiting / 1e9)
        tl.prfaas_queue.append(queues[Role.PRFAAS])
        tl.pd_prefill_queue.append(queues[Role.PD_PREFILL])
        tl.decode_waiting.append(waiting)
        tl.decode_running.append(running)
        tl.threshold_tokens.append(sim.scheduler.threshold_tokens)
        tl.num_pd_prefill.append(n_p)
        tl.num_pd_decode.append(n_d)
        tl.num_completed.append(len(sim.records))
