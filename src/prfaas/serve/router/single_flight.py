"""Work that concurrent callers share: the first caller for a key starts it, the others
join it while it runs (the router's cross-cluster prefix moves: ten requests sharing a
prefix wait for one move of it, not ten).

The work runs as its own task, so a caller that is cancelled (its client left) does not
cancel it for the callers that joined; the entry goes when the work ends, so a later call
for the same key starts afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class SingleFlight(Generic[_K, _V]):
    """In-flight work by key (see the module docstring)."""

    def __init__(self) -> None:
        self._running: dict[_K, asyncio.Task[_V]] = {}

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, key: _K, work: Callable[[], Coroutine[Any, Any, _V]]) -> tuple[_V, bool]:
        """`work()`'s result, and whether this call joined work already running for `key`."""
        task = self._running.get(key)
        joined = task is not None
        if task is None:
            task = asyncio.get_running_loop().create_task(work())
            self._running[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        return await asyncio.shield(task), joined

    def _forget(self, key: _K, done: asyncio.Task[_V]) -> None:
        if self._running.get(key) is done:
            del self._running[key]
