"""The discrete-event core: one heap of events ordered by an explicit (time, priority, seq) key.

    loop = EventLoop()
    loop.schedule(time_s, EventPriority.ARRIVAL, handler, argument)
    loop.run(until_s)              # pops in key order, sets loop.now_s, calls handler(argument)

Simultaneous events are ordered by priority, then by the order they were scheduled (seq), so a
run is a deterministic function of its inputs. The priorities encode causality at one instant:
a capacity change applies before anything that reads capacity; a completion frees its
resources before an arrival at the same instant looks for them; control (sampling, the slow
scheduler loop) sees the instant's final state. Nothing is cancelled in the heap: components
that reschedule (a link whose rates change) carry a version and ignore stale events, which
keeps the hot loop to one heappop and one call. No framework, no clock: time is a number.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from enum import IntEnum
from typing import Any

Handler = Callable[[Any], None]


class EventPriority(IntEnum):
    CAPACITY = 0
    COMPLETION = 1
    ARRIVAL = 2
    CONTROL = 3


class EventLoop:
    """A heap of (time_s, priority, seq, handler, argument)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Handler, Any]] = []
        self._seq = 0
        self.now_s = 0.0
        self.num_events = 0

    def schedule(self, time_s: float, priority: EventPriority, handler: Handler, arg: Any) -> None:
        if time_s < self.now_s:
            raise ValueError(f"event at {time_s} s scheduled in the past (now {self.now_s} s)")
        self._seq += 1
        heapq.heappush(self._heap, (time_s, int(priority), self._seq, handler, arg))

    def __len__(self) -> int:
        return len(self._heap)

    def run(self, until_s: float = float("inf")) -> None:
        """Process events with time <= until_s (all of them by default)."""
        heap, pop = self._heap, heapq.heappop
        count = 0
        while heap and heap[0][0] <= until_s:
            time_s, _, _, handler, arg = pop(heap)
            self.now_s = time_s
            handler(arg)
            count += 1
        self.num_events += count
