"""The inter-cluster link: max-min fair sharing among concurrent KV flows.

Each transfer is one flow striped over the sender's TCP connections, so flows share the link
fairly (processor sharing) rather than by connection count. Usable capacity is

    min(capacity now, num_connections * per_connection_bytes_per_s)

(one TCP connection rarely fills a long fat pipe; with enough connections the link does). A flow
may carry a rate cap: while its prefill still runs it can send no faster than its layers come
out (layer-wise pipelining, paper section 3: cap = S_kv / T_prefill); the cap lifts when prefill
ends. Rates are water-filled: capped flows take their cap, the rest split what remains equally.
Delivery adds half the RTT. Capacity is a step function of time (constant, stepped, or read
from a time series) applied by CAPACITY events.

Every change (flow added, cap lifted, capacity step, flow done) settles progress at the old
rates, recomputes rates and schedules one check at the earliest finish; older checks carry a
stale version and are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prfaas.sim.core import EventLoop, EventPriority

_DONE_BYTES = 1e-3


@dataclass(slots=True)
class Flow:
    remaining_bytes: float
    cap_bytes_per_s: float
    on_delivered: Callable[[Any], None]
    payload: Any
    rate_bytes_per_s: float = 0.0


class FairShareLink:
    def __init__(
        self,
        loop: EventLoop,
        capacity_bytes_per_s: float,
        rtt_s: float,
        connection_limit_bytes_per_s: float = float("inf"),
    ) -> None:
        self.loop = loop
        self.rtt_s = rtt_s
        self.connection_limit_bytes_per_s = connection_limit_bytes_per_s
        self._capacity = capacity_bytes_per_s
        self._flows: list[Flow] = []
        self._settled_s = 0.0
        self._version = 0
        self.delivered_bytes = 0.0

    @property
    def capacity_bytes_per_s(self) -> float:
        return min(self._capacity, self.connection_limit_bytes_per_s)

    @property
    def bytes_waiting(self) -> float:
        self._settle()
        return sum(f.remaining_bytes for f in self._flows)

    @property
    def egress_bytes_per_s(self) -> float:
        return sum(f.rate_bytes_per_s for f in self._flows)

    @property
    def num_flows(self) -> int:
        return len(self._flows)

    def set_capacity(self, capacity_bytes_per_s: float) -> None:
        self._settle()
        self._capacity = capacity_bytes_per_s
        self._reschedule()

    def send(
        self,
        num_bytes: float,
        cap_bytes_per_s: float,
        on_delivered: Callable[[Any], None],
        payload: Any,
    ) -> Flow:
        self._settle()
        flow = Flow(max(num_bytes, _DONE_BYTES * 2), cap_bytes_per_s, on_delivered, payload)
        self._flows.append(flow)
        self._reschedule()
        return flow

    def lift_cap(self, flow: Flow) -> None:
        if flow.cap_bytes_per_s == float("inf"):
            return
        self._settle()
        flow.cap_bytes_per_s = float("inf")
        self._reschedule()

    def _settle(self) -> None:
        now = self.loop.now_s
        elapsed = now - self._settled_s
        if elapsed > 0:
            for flow in self._flows:
                sent = flow.rate_bytes_per_s * elapsed
                flow.remaining_bytes -= sent
                self.delivered_bytes += sent
        self._settled_s = now

    def _water_fill(self) -> None:
        flows = sorted(self._flows, key=lambda f: f.cap_bytes_per_s)
        left, n = self.capacity_bytes_per_s, len(flows)
        for i, flow in enumerate(flows):
            fair = left / (n - i)
            flow.rate_bytes_per_s = min(flow.cap_bytes_per_s, fair)
            left -= flow.rate_bytes_per_s

    def _reschedule(self) -> None:
        done = [f for f in self._flows if f.remaining_bytes <= _DONE_BYTES]
        if done:
            self._flows = [f for f in self._flows if f.remaining_bytes > _DONE_BYTES]
            for flow in done:
                self.delivered_bytes += flow.remaining_bytes
                flow.remaining_bytes = 0.0
                self.loop.schedule(
                    self.loop.now_s + self.rtt_s / 2,
                    EventPriority.COMPLETION,
                    flow.on_delivered,
                    flow.payload,
                )
        self._water_fill()
        self._version += 1
        finishes = [
            f.remaining_bytes / f.rate_bytes_per_s for f in self._flows if f.rate_bytes_per_s > 0
        ]
        if finishes:
            self.loop.schedule(
                self.loop.now_s + min(finishes),
                EventPriority.COMPLETION,
                self._check,
                self._version,
            )

    def _check(self, version: int) -> None:
        if version != self._version:
            return
        self._settle()
        # The earliest flow finishes now; float dust must not leave it a sliver behind.
        for flow in self._flows:
            if flow.rate_bytes_per_s > 0 and flow.remaining_bytes / flow.rate_bytes_per_s < 1e-9:
                flow.remaining_bytes = 0.0
        self._reschedule()
