"""The router under overload: a bound on the work it takes in, and a watch on its own loop.

A router saturated on one core used to take its healthy instances for dead (its polls timed
out while its own event loop was busy), then answered requests 400 (a context of 0 read
while no instance was "up") and 503. Two mechanisms keep overload an honest 429 instead:

    InflightLimit   ASGI middleware (innermost, after `serve.edge.guard.EdgeGuard` read the body):
                    at most `router.max_inflight_requests` requests that use the instances
                    (completions, chat, tokenize, detokenize) run at once, streams until
                    their last byte; past it, 429 `rate_limit_exceeded` with
                    `Retry-After: RETRY_AFTER_S`, at once, without touching an instance.
                    /health, /metrics, /admin and /dashboard are never limited.

    LoopWatch       a task that sleeps `INTERVAL_S` and records how late it woke (the time
                    callbacks wait in the loop's ready queue). `stalled_since(t0)` says
                    whether a call started at `t0` ran while the loop was late by
                    `STALL_S` or more: a timeout of such a call is the router's slowness,
                    not a failure of the instance it called (`serve.router.registry`).

Lifecycle: both are built in `router.build_app`; the watch runs in the lifespan, next to the
registry's poller.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from prfaas.serve.errors import error_body

#: Routes that call instances (and so are what overload is made of).
LIMITED_PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"})
RETRY_AFTER_S = 1.0
INTERVAL_S = 0.05
STALL_S = 0.25


class InflightLimit:
    """At most `max_inflight` limited requests at once; the next one gets 429 + Retry-After."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_inflight: int,
        on_refused: Callable[[str, int], None] | None = None,
    ) -> None:
        self.app = app
        self.max_inflight = max_inflight
        self.inflight = 0
        self.on_refused = on_refused  # (path, status) of a refused request: for the metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in LIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.inflight >= self.max_inflight:
            await _too_many(send, self.max_inflight)
            if self.on_refused is not None:
                self.on_refused(scope["path"], 429)
            return
        self.inflight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.inflight -= 1


async def _too_many(send: Send, limit: int) -> None:
    message = (
        f"overloaded: the router already serves {limit} requests "
        f"(router.max_inflight_requests); retry after {RETRY_AFTER_S:g} s"
    )
    body = error_body(message, "requests")
    body["error"]["code"] = "rate_limit_exceeded"
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"retry-after", str(max(1, math.ceil(RETRY_AFTER_S))).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


class LoopWatch:
    """How late this event loop runs what is due (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._asleep_s: float | None = None  # when the watch's current sleep began
        self.last_stall_s: float | None = None  # when a stall of STALL_S or more was seen

    async def run(self) -> None:
        """Sleep INTERVAL_S forever, recording every wake-up late by STALL_S or more."""
        while True:
            self._asleep_s = self._clock()
            await asyncio.sleep(INTERVAL_S)
            self.observe(self._asleep_s, self._clock())

    def observe(self, asleep_s: float, woke_s: float) -> None:
        """One sleep of INTERVAL_S that began at `asleep_s` and ended at `woke_s`."""
        if woke_s - asleep_s - INTERVAL_S >= STALL_S:
            self.last_stall_s = woke_s

    def stalled_since(self, started_s: float) -> bool:
        """Whether the loop was late by STALL_S or more at some point after `started_s`
        (this watch's clock), a wake-up overdue right now included."""
        if self.last_stall_s is not None and self.last_stall_s >= started_s:
            return True
        if self._asleep_s is None:
            return False
        return self._clock() - self._asleep_s - INTERVAL_S >= STALL_S
