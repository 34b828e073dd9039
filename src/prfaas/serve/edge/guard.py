"""The HTTP edge of the router and of every instance: what a client cannot do to the process,
before any route runs. One mechanism, two configurations (`router.*` limits; an instance's
`instance_edge.*` limits plus its signature check, `serve.auth.control`).

`EdgeGuard` (an ASGI middleware, outermost inside the app) reads every request body itself
(an instance's: every request, as its signature covers the body):

    a `gate`'s check of the headers fails     its status (an instance: 401 for a call not
                                              signed for it) before a byte of the body is read
    Content-Type not JSON                     415 (a missing one is taken as JSON)
    Content-Length over max_body_bytes        413 before a byte of the body is read
    a body (chunked too) crossing the limit   413 as soon as it crosses: at most
                                              max_body_bytes (+ one chunk) is ever held;
                                              what follows is read and dropped for at most
                                              LINGER_S, then the connection is closed
    the body not complete in body_timeout_s   408 (a client sending one byte a second)
    a `gate`'s check of the whole body fails  its status (an instance: 401, bad signature)

then hands the route the buffered body. Any exception a route lets escape becomes OpenAI's
JSON 500 with a request id (logged with its traceback), never Starlette's plain-text one, and
the connection stays usable (uvicorn closes a connection whose app raised).

`edge_server_config` is the uvicorn configuration of both: `header_timeout_protocol`,
uvicorn's h11 protocol with a deadline on request headers (a connection that has not sent
complete headers within `header_timeout_s` of connecting, or of starting its next request, is
closed; what h11 cannot parse is answered with a JSON 400), uvicorn's `timeout_keep_alive` for
the idle time between requests and h11's `max_incomplete_event_size` for the size of the
headers (MAX_HEADER_BYTES).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import h11
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from prfaas.serve.errors import (
    PayloadTooLargeError,
    RequestTimeoutError,
    ServeError,
    UnsupportedMediaTypeError,
    error_body,
)

log = logging.getLogger("prfaas.router")

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
LINGER_S = 2.0
LINGER_BYTES = 64 * 2**20
MAX_HEADER_BYTES = 16 * 1024  # h11's default, stated: request line plus headers


class BodyGate(Protocol):
    """A check `EdgeGuard` runs around its read of a body (`serve.auth.control.ControlGate`):
    each method raises a `ServeError` to refuse the request."""

    def check_head(self, scope: Scope) -> None:
        """On the request line and headers, before a byte of the body is read."""

    def check_body(self, scope: Scope, body: bytes) -> None:
        """On the whole body, once it is read (bounded and timed)."""


class EdgeGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        gate: BodyGate | None = None,
        on_refused: Callable[[str, int], None] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.gate = gate  # checks every request (all methods), around its body
        self.on_refused = on_refused  # (path, status) of a body refused here: for the metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req-{uuid.uuid4().hex[:16]}"
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            if self.gate is not None or scope["method"] in _BODY_METHODS:
                body = await self._read_body(scope, receive)
                receive = replay_body(body, receive)
            await self.app(scope, receive, tracked_send)
        except ServeError as err:  # from the body checks: the route never ran
            if started:
                raise
            await _respond(send, err.status_code, err.body(), close=True)
            if self.on_refused is not None:
                self.on_refused(scope["path"], err.status_code)
            if isinstance(err, PayloadTooLargeError):
                await _linger(receive, self.body_timeout_s)
        except Exception:
            log.exception("request %s failed", request_id)
            if started:
                raise  # mid-response: uvicorn closes the connection, the client sees it cut
            error = error_body(f"internal error (request id {request_id})", "server_error")
            await _respond(send, 500, error, close=False)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        if self.gate is not None:
            self.gate.check_head(scope)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        _check_content_type(headers.get("content-type"))
        limit = self.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise PayloadTooLargeError(f"request body of {declared[:20]} bytes > {limit}")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        break
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLargeError(f"request body over {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            raise RequestTimeoutError(
                f"the request body did not arrive within {self.body_timeout_s} s"
            ) from None
        body = b"".join(chunks)
        if self.gate is not None:
            self.gate.check_body(scope, body)
        return body


async def _linger(receive: Receive, timeout_s: float) -> None:
    """Read and drop what the client still sends of a refused body, for a moment, before the
    connection closes: closing a socket with unread data resets it, and the reset can destroy
    the 413 in the client's receive buffer before it read it (nginx's lingering close). Held
    memory stays one chunk."""
    dropped = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(min(LINGER_S, timeout_s)):
            while dropped < LINGER_BYTES:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return
                dropped += len(message.get("body", b""))


def _check_content_type(value: str | None) -> None:
    if value is None:
        return  # curl without -H, many scripts: taken as JSON, parsed strictly anyway
    media, _, params = value.partition(";")
    media = media.strip().lower()
    charset = params.strip().lower().removeprefix("charset=").strip('"') if params else "utf-8"
    if (media == "application/json" or media.endswith("+json")) and charset in ("utf-8", "utf8"):
        return
    raise UnsupportedMediaTypeError(
        f"Content-Type {value[:80]!r} is not supported: send application/json (UTF-8)"
    )


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the buffered body once, then the client's later messages
    (a disconnect) as they come."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _respond(send: Send, status: int, body: dict[str, Any], *, close: bool) -> None:
    payload = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    if close:  # the body was not read to its end: the connection cannot be reused
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


def edge_server_config(
    app: ASGIApp, *, host: str, port: int, header_timeout_s: float, keep_alive_timeout_s: float
) -> uvicorn.Config:
    """uvicorn's configuration of an edge: headers bounded in time and size, idle keep-alive
    connections closed."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=header_timeout_protocol(header_timeout_s),
        timeout_keep_alive=max(1, round(keep_alive_timeout_s)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )


def header_timeout_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing connections whose request headers take longer than
    `header_timeout_s` (slowloris)."""

    class HeaderTimeoutProtocol(H11Protocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._between_requests and self._header_deadline is None:
                self._arm()
            super().data_received(data)

        def handle_events(self) -> None:
            super().handle_events()
            if not self._between_requests:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        @property
        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._disarm()
            self._header_deadline = self.loop.call_later(header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to a request h11 cannot parse (bad request line, headers over
            the size limit, broken chunked framing), as OpenAI JSON instead of plain text."""
            payload = json.dumps(error_body(msg, "invalid_request_error")).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ]
            with contextlib.suppress(h11.LocalProtocolError):  # mid-response: just close
                for event in (
                    h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                    h11.Data(data=payload),
                    h11.EndOfMessage(),
                ):
                    self.transport.write(self.conn.send(event))
            self.transport.close()

        def _expired(self) -> None:
            self._header_deadline = None
            if self._between_requests and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol
