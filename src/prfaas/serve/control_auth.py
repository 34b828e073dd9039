"""Signed calls to an instance's control API: only its own deployment's router gets through.

Every request to an instance (`serve.instance`) carries three headers:

    X-Prfaas-Timestamp   integer Unix seconds when it was signed
    X-Prfaas-Nonce       32 random hex digits, never reused
    X-Prfaas-Signature   hex HMAC-SHA256(key, "prfaas-control-v1" LF method LF path[?query]
                         LF hex SHA-256 of the body LF timestamp LF nonce)

where `key = HMAC-SHA256(deployment secret, "prfaas-control")`: the transfer secret every
process of the deployment already shares, under its own label, so a control signature is never
a valid transfer-handshake MAC or the other way round. The instance (`ControlAuthMiddleware`)
answers 401 (OpenAI error JSON) to a request without a valid signature, with a timestamp more
than `window_s` (30 s) away from its clock, or with a nonce it has already seen within the
window (replay); the body is read once, bounded by `max_body_bytes` (413 beyond), checked and
handed on. The router's client signs every request (`ControlSigner`, an `httpx.Auth`).

What this does not do: hide the calls (an on-path observer reads prompts and tokens; run the
control network inside TLS or a private network for that) or survive clocks more than the
window apart. A nonce remembered by an instance is forgotten when it restarts: a request
recorded within the last `window_s` could be replayed once against the restarted process.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import httpx

from prfaas.serve.admin_auth import App, Receive, Scope, Send
from prfaas.serve.edge import replay_body
from prfaas.serve.errors import error_body

TIMESTAMP_HEADER = "x-prfaas-timestamp"
NONCE_HEADER = "x-prfaas-nonce"
SIGNATURE_HEADER = "x-prfaas-signature"
LABEL = b"prfaas-control-v1"
WINDOW_S = 30.0
MAX_BODY_BYTES = 64 * 2**20
NONCE_HEX_CHARS = 32
MAX_NONCES = 1_000_000


def control_key(secret: bytes) -> bytes:
    """The control API's HMAC key, derived from the deployment's shared secret."""
    return hmac.new(secret, b"prfaas-control", hashlib.sha256).digest()


def signature(
    key: bytes, method: str, target: str, *, body: bytes, timestamp: str, nonce: str
) -> str:
    """Hex MAC of one request (`target`: path plus `?query` when there is one)."""
    message = b"\n".join(
        (
            LABEL,
            method.upper().encode(),
            target.encode(),
            hashlib.sha256(body).hexdigest().encode(),
            timestamp.encode(),
            nonce.encode(),
        )
    )
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def signed_headers(
    key: bytes, method: str, target: str, body: bytes, now_s: float | None = None
) -> dict[str, str]:
    timestamp = str(int(time.time() if now_s is None else now_s))
    nonce = secrets.token_hex(NONCE_HEX_CHARS // 2)
    return {
        TIMESTAMP_HEADER: timestamp,
        NONCE_HEADER: nonce,
        SIGNATURE_HEADER: signature(
            key, method, target, body=body, timestamp=timestamp, nonce=nonce
        ),
    }


class ControlSigner(httpx.Auth):
    """Signs every request of an httpx client (the router's client to its instances)."""

    requires_request_body = True

    def __init__(self, secret: bytes) -> None:
        self._key = control_key(secret)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        target = request.url.raw_path.decode("ascii")
        request.headers.update(signed_headers(self._key, request.method, target, request.content))
        yield request


@dataclass(slots=True)
class NonceBook:
    """Nonces seen within the window (oldest first), forgotten once they are older."""

    window_s: float
    max_nonces: int = MAX_NONCES
    _seen: OrderedDict[str, float] = field(default_factory=OrderedDict)

    def admit(self, nonce: str, now_s: float) -> bool:
        """True the first time `nonce` is seen within the window (recorded), else False."""
        while self._seen:
            oldest, seen_s = next(iter(self._seen.items()))
            if now_s - seen_s <= 2 * self.window_s and len(self._seen) < self.max_nonces:
                break
            del self._seen[oldest]
        if nonce in self._seen:
            return False
        self._seen[nonce] = now_s
        return True


class ControlAuthMiddleware:
    """ASGI middleware of an instance: every HTTP request must be signed with its key."""

    def __init__(
        self,
        app: App,
        secret: bytes,
        *,
        window_s: float = WINDOW_S,
        max_body_bytes: int = MAX_BODY_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._key = control_key(secret)
        self._window_s = window_s
        self._max_body_bytes = max_body_bytes
        self._clock = clock
        self._nonces = NonceBook(window_s)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        body = await _read_body(receive, self._max_body_bytes)
        if body is None:
            await _refuse(send, 413, f"control request body over {self._max_body_bytes} bytes")
            return
        problem = self._problem(scope, body)
        if problem is not None:
            await _refuse(send, 401, problem)
            return
        await self._app(scope, replay_body(body, receive), send)

    def _problem(self, scope: Scope, body: bytes) -> str | None:
        """Why the request is refused (None: it is authentic and fresh)."""
        headers = {name.decode("latin-1"): value for name, value in scope["headers"]}
        try:
            timestamp = headers[TIMESTAMP_HEADER].decode("ascii")
            nonce = headers[NONCE_HEADER].decode("ascii")
            mac = headers[SIGNATURE_HEADER].decode("ascii")
            signed_s = int(timestamp)
        except (KeyError, UnicodeDecodeError, ValueError):
            return "unsigned control request (this instance takes calls from its router only)"
        target = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        full = target.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        expected = signature(
            self._key, scope["method"], full, body=body, timestamp=timestamp, nonce=nonce
        )
        if not hmac.compare_digest(mac, expected):
            return "bad control request signature"
        now_s = self._clock()
        if abs(now_s - signed_s) > self._window_s:
            return f"stale control request (signed {now_s - signed_s:+.0f} s from now)"
        if len(nonce) != NONCE_HEX_CHARS or not self._nonces.admit(nonce, now_s):
            return "replayed control request (nonce already used)"
        return None


async def _read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The whole request body, or None once it passes `max_bytes` (reading stops there)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _refuse(send: Send, status: int, message: str) -> None:
    kind = "authentication_error" if status == 401 else "invalid_request_error"
    raw = json.dumps(error_body(message, kind)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})
