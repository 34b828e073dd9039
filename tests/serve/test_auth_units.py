"""Bearer tokens on the router's paths on their own (a tiny ASGI app behind the middleware);
signed control calls on an instance: test_control_auth.py."""

from __future__ import annotations

import asyncio

import httpx
from fastapi import FastAPI, Request
from hypothesis import given
from hypothesis import strategies as st

from prfaas.serve.auth.admin import BearerAuth, bearer_matches, router_guards

ADMIN = "admin-token-0123456789abcdef"
KEY = "api-key-for-v1"


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
