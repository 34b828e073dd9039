"""Bearer tokens on the router's HTTP API: always on `/admin/*`, on `/v1/*` when a key is set.

    /admin/*   `Authorization: Bearer <admin token>`, else 401 (OpenAI error JSON)
    /v1/*      `Authorization: Bearer <api key>` when `router.api_key` / $PRFAAS_API_KEY is
               set (as vLLM's `--api-key`), open otherwise
    /health, /metrics   open (probes and scrapers; they reveal load, no prompts)

The admin token is the file's `router.admin_token`, else `$PRFAAS_ADMIN_TOKEN`; `prfaas up`
generates one when both are unset and prints it once (the router gets it in the variable);
a router started alone without one generates its own and prints it once to stderr. Tokens
are compared in constant time (`hmac.compare_digest`). A pure ASGI middleware, so no route
can be added without it and streaming responses pass through untouched.
"""

from __future__ import annotations

import hmac
import json
import secrets
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from prfaas.serve.config.deployment import Deployment, configured_admin_token
from prfaas.serve.errors import error_body

MIN_TOKEN_BYTES = 16

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    return secrets.token_urlsafe(32)


def admin_token(deployment: Deployment, *, announce: bool) -> str:
    """The configured admin token (`config.configured_admin_token`), else a new one (printed
    once to stderr when `announce`)."""
    found = configured_admin_token(deployment)
    if found is not None:
        return found.value
    token = new_token()
    if announce:
        print(f"prfaas: admin token (Authorization: Bearer): {token}", file=sys.stderr)
    return token


def bearer_matches(header: bytes | None, token: str) -> bool:
    """Whether an `Authorization` header value carries `token` (constant-time)."""
    if header is None:
        return False
    scheme, _, value = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(value.strip(), token.encode())


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """ASGI middleware: requests under a guarded prefix need their prefix's bearer token."""

    app: App
    guarded: tuple[tuple[str, str], ...]  # (path prefix, token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            token = self._token_for(scope["path"])
            if token is not None and not bearer_matches(_authorization(scope), token):
                await _unauthorized(send)
                return
        await self.app(scope, receive, send)

    def _token_for(self, path: str) -> str | None:
        for prefix, token in self.guarded:
            if path == prefix or path.startswith(prefix + "/"):
                return token
        return None


def router_guards(admin: str, key: str | None) -> tuple[tuple[str, str], ...]:
    """`BearerAuth.guarded` of the router: /admin always, /v1 when an API key is set."""
    return (("/admin", admin),) if key is None else (("/admin", admin), ("/v1", key))


def _authorization(scope: Scope) -> bytes | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return bytes(value)
    return None


async def _unauthorized(send: Send) -> None:
    body = error_body(
        "missing or wrong bearer token (Authorization: Bearer <token>)",
        "authentication_error",
        "invalid_api_key",
    )
    raw = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})
