"""An instance's prefill and move calls in progress, by request id, so `POST /cancel` can end them.

A non-streamed call is not cancelled when its caller goes away (Starlette runs the endpoint
to its end), so a prefill whose client left would run on, ship its KV and hold the decode
side's pages. The router therefore sends `POST /cancel` for every request that ends without
its decode (`serve.router.flow`); the instance cancels the call's task here, which aborts its
transfer (the receiver frees the pages) and cancels its work in the backend. The call then
answers 409 `cancelled`, to a caller that is usually gone. A `/cancel` that overtakes its
call (it comes on another connection) is remembered (the last `MAX_CANCELLED` ids), and the
call is refused with the same 409 when it arrives.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any, TypeVar

from prfaas.serve.errors import ConflictError

_T = TypeVar("_T")
MAX_CANCELLED = 4096


class RunningCalls:
    """Tasks of calls in progress, by request id (one call per id at a time)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._cancelled: set[asyncio.Task[Any]] = set()
        self._early: OrderedDict[str, None] = OrderedDict()  # cancelled before they came

    def __len__(self) -> int:
        return len(self._tasks)

    async def run(self, request_id: str, work: Coroutine[Any, Any, _T]) -> _T:
        """`work`'s result; 409 when `cancel(request_id)` ended it first."""
        if request_id in self._early:
            del self._early[request_id]
            work.close()
            raise ConflictError(f"request {request_id} was cancelled")
        if request_id in self._tasks:
            work.close()
            raise ConflictError(f"request {request_id} is running already")
        task = asyncio.get_running_loop().create_task(work)
        self._tasks[request_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            if task not in self._cancelled:
                raise  # our own caller was cancelled (shutdown): it goes on up
            raise ConflictError(f"request {request_id} was cancelled") from None
        finally:
            del self._tasks[request_id]
            self._cancelled.discard(task)

    def cancel(self, request_id: str) -> bool:
        """Cancel the call running for `request_id` (False: none is; a call for it that
        comes later is refused)."""
        task = self._tasks.get(request_id)
        if task is None or task.done():
            self._early[request_id] = None
            while len(self._early) > MAX_CANCELLED:
                self._early.popitem(last=False)
            return False
        self._cancelled.add(task)
        task.cancel()
        return True
