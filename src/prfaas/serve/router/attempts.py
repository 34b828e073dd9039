"""How an attempt of a request failed, so the router knows what to hold against whom
(`serve.router.flow.generate`: a retry never returns to the instance named in the failure).

    RequestFailed   the request failed on an instance that is still up: counted against it
                    (`serve.router.breaker`), the instance stays in service
    InstanceDown    a transport failure the instance's health probe confirmed: marked failed
    InstanceFull    the instance had no room for the request now: not held against it; 503
                    when no other instance can take the request

`judge` tells the first two apart after a call got no answer; `unless_down` ends a call to an
instance that the registry marks down while the call waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from prfaas.serve.router.registry import LiveInstance, Registry

_Answer = TypeVar("_Answer")


class AttemptFailed(Exception):
    """An attempt failed before anything reached the client: place the request again,
    on any instance but `instance` (the one that failed it)."""

    def __init__(self, message: str, instance: str) -> None:
        super().__init__(message)
        self.instance = instance


class RequestFailed(AttemptFailed):
    """This request failed on an instance that is still up: it stays in service."""


class InstanceDown(AttemptFailed):
    """The instance is down (a transport failure its health probe confirmed): marked failed."""


class InstanceFull(AttemptFailed):
    """The instance had no room for this request now (`KvBufferFullError`): not held against
    it; the request goes elsewhere, or gets 503 when no other instance can take it."""


async def judge(registry: Registry, inst: LiveInstance, what: str, err: Exception) -> AttemptFailed:
    """Classify a call to `inst` that got no answer: down only if its probe fails too."""
    if await registry.probe(inst):
        message = f"{what} on {inst.name} failed ({err!r}); the instance is up"
        return RequestFailed(message, inst.name)
    registry.mark_failed(inst.name)
    return InstanceDown(f"{what} instance {inst.name} is down: {err!r}", inst.name)


async def unless_down(inst: LiveInstance, what: str, call: Coroutine[Any, Any, _Answer]) -> _Answer:
    """`call`'s answer, or `InstanceDown` as soon as `inst` is marked down while it waits. An
    instance gone silent (a cut WAN drops packets: no reset, no answer) fails only its
    polls; without this a call to it would wait out `router.request_timeout_s` instead of
    being placed again. The call is cancelled (its connection closed)."""
    answer = asyncio.ensure_future(call)
    down = asyncio.ensure_future(inst.went_down.wait())
    try:
        await asyncio.wait((answer, down), return_when=asyncio.FIRST_COMPLETED)
    finally:
        down.cancel()
        if not answer.done():
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
    if answer.cancelled() and down.done() and not down.cancelled():
        raise InstanceDown(f"{what} instance {inst.name} went silent (its polls fail)", inst.name)
    return answer.result()
