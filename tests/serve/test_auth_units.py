"""The two authentication layers on their own: bearer tokens on the router's paths, signed
control calls on an instance (a tiny ASGI app behind each middleware)."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI, Request
from hypothesis import given
from hypothesis import strategies as st

from prfaas.serve.admin_auth import BearerAuth, bearer_matches, router_guards
from prfaas.serve.control_auth import (
    ControlAuthMiddleware,
    ControlSigner,
    NonceBook,
    control_key,
    signed_headers,
)

ADMIN = "admin-token-0123456789abcdef"
KEY = "api-key-for-v1"
SECRET = b"the deployment secret, 32 bytes!"


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/{path:path}")
    async def echo_get(path: str) -> dict[str, str]:
        return {"path": path}

    @app.post("/{path:path}")
    async def echo_post(path: str, request: Request) -> dict[str, str]:
        return {"path": path, "body": (await request.body()).decode()}

    return app


def _status(app: FastAPI, method: str, path: str, **kwargs: object) -> int:
    async def call() -> int:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
            return response.status_code

    return asyncio.run(call())


def test_router_guards_admin_always_and_v1_only_with_a_key() -> None:
    open_v1 = _app()
    open_v1.add_middleware(BearerAuth, guarded=router_guards(ADMIN, None))
    bearer = {"Authorization": f"Bearer {ADMIN}"}
    assert _status(open_v1, "GET", "/admin/state") == 401
    assert _status(open_v1, "GET", "/admin/state", headers=bearer) == 200
    assert _status(open_v1, "GET", "/administrator") == 200  # a prefix of a name is not /admin
    assert _status(open_v1, "GET", "/v1/models") == 200
    assert _status(open_v1, "GET", "/health") == 200
    keyed = _app()
    keyed.add_middleware(BearerAuth, guarded=router_guards(ADMIN, KEY))
    assert _status(keyed, "GET", "/v1/models") == 401
    assert _status(keyed, "GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"}) == 200
    assert _status(keyed, "GET", "/v1/models", headers=bearer) == 401  # admin is not the key
    assert _status(keyed, "GET", "/metrics") == 200


@given(st.binary(max_size=64))
def test_only_the_exact_token_matches(guess: bytes) -> None:
    assert bearer_matches(b"Bearer " + guess, ADMIN) == (guess.strip() == ADMIN.encode())
    assert not bearer_matches(guess, ADMIN)  # no scheme, no match
    assert bearer_matches(b"bearer " + ADMIN.encode(), ADMIN)
    assert not bearer_matches(None, ADMIN)


def test_signed_calls_pass_and_everything_else_is_refused() -> None:
    app = _app()
    now = [1_000_000.0]
    app.add_middleware(ControlAuthMiddleware, secret=SECRET, clock=lambda: now[0])
    key = control_key(SECRET)

    def signed(method: str, target: str, body: bytes = b"", at: float | None = None) -> dict:
        return signed_headers(key, method, target, body, now_s=now[0] if at is None else at)

    assert _status(app, "GET", "/info") == 401
    assert _status(app, "GET", "/info", headers=signed("GET", "/info")) == 200
    assert _status(app, "GET", "/state?since=3", headers=signed("GET", "/state?since=3")) == 200
    assert _status(app, "GET", "/state?since=4", headers=signed("GET", "/state?since=3")) == 401
    assert _status(app, "POST", "/info", headers=signed("GET", "/info")) == 401
    assert _status(app, "GET", "/info", headers=signed("GET", "/info", at=now[0] - 31)) == 401
    assert _status(app, "GET", "/info", headers=signed("GET", "/info", at=now[0] + 29)) == 200
    body = b'{"text": "x"}'
    ok = signed("POST", "/tokenize", body)
    assert _status(app, "POST", "/tokenize", content=body, headers=ok) == 200
    assert _status(app, "POST", "/tokenize", content=body, headers=ok) == 401  # replay
    other = signed("POST", "/tokenize", body)
    assert _status(app, "POST", "/tokenize", content=b'{"text": "y"}', headers=other) == 401
    wrong = signed_headers(control_key(b"another secret of 32 bytes......"), "GET", "/info", b"")
    assert _status(app, "GET", "/info", headers=wrong) == 401


def test_the_signer_signs_what_the_middleware_checks() -> None:
    app = _app()
    app.add_middleware(ControlAuthMiddleware, secret=SECRET)

    async def call() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        auth = ControlSigner(SECRET)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as c:
            answers = [
                await c.get("/state", params={"since": 7}),
                await c.post("/prefill", json={"token_ids": [1, 2, 3]}),
                await c.post("/prefill", json={"token_ids": [1, 2, 3]}),  # a new nonce
            ]
        return [a.status_code for a in answers]

    assert asyncio.run(call()) == [200, 200, 200]


def test_an_oversized_control_body_is_refused_unread() -> None:
    app = _app()
    app.add_middleware(ControlAuthMiddleware, secret=SECRET, max_body_bytes=1000)
    assert _status(app, "POST", "/prefill", content=b"x" * 5000) == 413


def test_nonces_are_forgotten_only_after_they_can_no_longer_be_fresh() -> None:
    book = NonceBook(window_s=30.0)
    assert book.admit("a", 0.0) and not book.admit("a", 59.0)
    assert book.admit("a", 61.0)  # a timestamp 61 s old is stale anyway
    small = NonceBook(window_s=30.0, max_nonces=2)
    assert small.admit("a", 0.0) and small.admit("b", 1.0) and small.admit("c", 2.0)
