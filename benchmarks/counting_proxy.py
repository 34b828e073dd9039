"""A counting HTTP proxy between prfaas's router and one instance: every call the router makes,
with the bytes each way and when they passed (issue 25, point 4: round trips and bytes per
request before the first token).

    proxy = CountingProxy(name, upstream_port); await proxy.start()   # proxy.port: where
                                                                      # the router calls
    ... a request ...
    round_trips(calls, sent_at_s, first_token_at_s)                  # what happened before
                                                                      # its first token

The router is started with a deployment file whose instance `http_port`s are the proxies'
(the instances with the real ones): the control signature names the instance, not its port,
so the calls pass unchanged. Each downstream connection gets its own upstream connection
(keep-alive kept on both sides); bodies are relayed piece by piece as they arrive, each piece
stamped, so a streamed `/decode` counts only the bytes that came before the first token.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from http1 import Head, ProtocolError, chunk, iter_body, read_head

if TYPE_CHECKING:
    from load_client import Outcome


@dataclass
class Call:
    """One call through the proxy: its request, and its response pieces as they arrived."""

    instance: str
    method: str
    path: str
    started_s: float  # time.monotonic() when its head arrived
    sent_bytes: int  # head and body, router -> instance
    received: list[tuple[float, int]] = field(default_factory=list)  # (when, bytes) back
    ended_s: float | None = None

    def received_before(self, at_s: float) -> int:
        return sum(n for when, n in self.received if when <= at_s)


class CountingProxy:
    def __init__(self, name: str, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.name = name
        self.host = host
        self.upstream_port = upstream_port
        self.calls: list[Call] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()  # both ends of every live connection

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """No new connections; the live ones closed, so their relays end on their own."""
        if self._server is not None:
            self._server.close()
        for writer in self._open:
            writer.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)

    async def _serve(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(self.host, self.upstream_port, limit=2**20)
        except OSError:  # the instance is not listening yet (start-up): as if it were down
            down_w.close()
            return
        self._open.update((up_w, down_w))
        try:
            while (head := await read_head(down_r)) is not None:
                await self._relay(head, down_r, down_w, up_r, up_w)
        except (ProtocolError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open.difference_update((up_w, down_w))
            up_w.close()
            down_w.close()

    async def _relay(
        self,
        head: Head,
        down_r: asyncio.StreamReader,
        down_w: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        """One request up and its response down, counted."""
        call = Call(self.name, head.start[0], head.start[1], time.monotonic(), len(head.raw))
        self.calls.append(call)
        up_w.write(head.raw)
        async for piece in iter_body(down_r, head):
            call.sent_bytes += len(piece)
            up_w.write(chunk(piece) if head.is_chunked else piece)
        if head.is_chunked:
            up_w.write(chunk(b""))
        await up_w.drain()
        answer = await read_head(up_r)
        if answer is None:
            raise ProtocolError("the instance closed the connection")
        call.received.append((time.monotonic(), len(answer.raw)))
        down_w.write(answer.raw)
        await down_w.drain()
        async for piece in iter_body(up_r, answer, is_response=True):
            call.received.append((time.monotonic(), len(piece)))
            down_w.write(chunk(piece) if answer.is_chunked else piece)
            await down_w.drain()
        if answer.is_chunked:
            down_w.write(chunk(b""))
            await down_w.drain()
        call.ended_s = time.monotonic()


#: The router's polling of every instance (`GET /state`, `/info`): not part of any request.
POLLING_METHOD = "GET"


def round_trips(calls: list[Call], sent_at_s: float, first_token_at_s: float) -> dict[str, object]:
    """The calls a request made before its first token: how many, how many one after another
    (a call that starts before every earlier one ended shares its step), and their bytes.
    Polling (GET) is left out: it runs on its own clock, request or not."""
    before = sorted(
        (c for c in calls if sent_at_s <= c.started_s <= first_token_at_s),
        key=lambda c: c.started_s,
    )
    before = [c for c in before if c.method != POLLING_METHOD]
    steps, step_end_s = 0, float("-inf")
    for c in before:
        end_s = min(c.ended_s or first_token_at_s, first_token_at_s)
        if c.started_s >= step_end_s:
            steps += 1
            step_end_s = end_s
        else:
            step_end_s = max(step_end_s, end_s)
    return {
        "calls": len(before),
        "sequential_round_trips": steps,
        "bytes_to_instances": sum(c.sent_bytes for c in before),
        "bytes_from_instances": sum(c.received_before(first_token_at_s) for c in before),
        "each": [
            {
                "call": f"{c.method} {c.path.split('?', 1)[0]} -> {c.instance}",
                "bytes_sent": c.sent_bytes,
                "bytes_received_before_first_token": c.received_before(first_token_at_s),
            }
            for c in before
        ],
    }


def measured(proxies: Sequence[CountingProxy], outcome: Outcome) -> dict[str, object]:
    """One measured request's calls before its first token (`round_trips` over every proxy's
    calls), or its error when it failed."""
    if not outcome.is_ok or outcome.first_token_at_s is None or outcome.ttft_s is None:
        return {"error": outcome.error}
    calls = [c for proxy in proxies for c in proxy.calls]
    sent_s = outcome.first_token_at_s - outcome.ttft_s
    return round_trips(calls, sent_s, outcome.first_token_at_s)
