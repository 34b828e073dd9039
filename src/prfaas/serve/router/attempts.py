"""How an attempt of a request failed, so the router knows what to hold against whom
(`serve.router.flow.generate`: a retry never returns to the instance named in the failure).

    RequestFailed   the request failed on an instance that is still up: counted against it
                    (`serve.router.breaker`), the instance stays in service
    InstanceDown    a transport failure the instance's health probe confirmed: marked failed
    InstanceFull    the instance had no room for the request now: not held against it; 503
                    when no other instance can take the request

`judge` tells the first two apart after a call got no answer.
"""

from __future__ import annotations

from prfaas.serve.router.registry import LiveInstance, Registry


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
