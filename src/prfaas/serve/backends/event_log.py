"""`EventLog`: an instance's cache events with sequence numbers, the one log every backend keeps.

The backend appends the pool's events as it drains them (the torch backend on its engine
thread, the emulated one on the event loop, the vLLM one as it translates vLLM's KV events);
the router pulls them through `GET /state?since=N` (`serve.router.registry`), which answers
`since(N)`:

    seq   0 1 2 ... 199_999 200_000 ...      numbers go up by one per event, never reused
    kept        [oldest .............. next_seq)   at most `capacity` events; older dropped

A caller that asks for events the log has dropped gets the oldest it kept: the first event's
`seq` above the asked number says how many it lost. `since` costs the events it returns, not
the log's length (numbers are consecutive, so the n-th newest event is found by position).
Thread-safe: appends and reads may come from different threads.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from prfaas.kvcache import CacheEvent

MAX_EVENT_LOG = 200_000


@dataclass(frozen=True, slots=True)
class SeqEvent:
    """A pool event with the instance's sequence number."""

    seq: int
    event: CacheEvent


class EventLog:
    """Cache events numbered from 0, the newest `capacity` kept (see the module docstring)."""

    def __init__(self, capacity: int = MAX_EVENT_LOG) -> None:
        if capacity < 1:
            raise ValueError(f"an event log keeps at least one event, not {capacity}")
        self._events: deque[SeqEvent] = deque(maxlen=capacity)
        self._next_seq = 0
        self._lock = threading.Lock()

    def extend(self, events: Iterable[CacheEvent]) -> None:
        """Number and keep `events`, in order (the oldest kept ones fall off past capacity)."""
        with self._lock:
            for event in events:
                self._events.append(SeqEvent(self._next_seq, event))
                self._next_seq += 1

    def since(self, seq: int) -> tuple[list[SeqEvent], int]:
        """The kept events numbered `seq` or later, oldest first, and the next number."""
        with self._lock:
            wanted = min(len(self._events), max(0, self._next_seq - seq))
            newest_first = list(islice(reversed(self._events), wanted))
            return newest_first[::-1], self._next_seq
