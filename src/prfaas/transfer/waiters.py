"""A wake-all signal for asyncio tasks that wait on counters (window, backlog, events)."""

from __future__ import annotations

import asyncio


class Waiters:
    """Tasks `wait()` until someone calls `wake()`; each waiter re-checks its own condition."""

    def __init__(self) -> None:
        self._futures: list[asyncio.Future[None]] = []

    async def wait(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self._futures.append(future)
        await future

    def wake(self) -> None:
        futures, self._futures = self._futures, []
        for future in futures:
            if not future.done():
                future.set_result(None)
