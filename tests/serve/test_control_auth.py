"""Signed control calls on their own (`serve.auth.control`): what a signature binds, and an
instance's edge (`serve.edge.guard.EdgeGuard` with a `ControlGate`) in front of a tiny ASGI app:
a call is taken once, at the instance it was signed for, and refused before its body is read
when its headers already say no."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from hypothesis import assume, given
from hypothesis import strategies as st

from prfaas.serve.auth.control import (
    Admission,
    ControlCall,
    ControlGate,
    ControlSigner,
    NonceBook,
    control_key,
    signature,
    signed_headers,
)
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec
from prfaas.serve.edge.guard import EdgeGuard
from prfaas.serve.errors import AuthenticationError

SECRET = b"the deployment secret, 32 bytes!"
KEY = control_key(SECRET)
NAME = "pdd-0"
NOW_S = 1_000_000.0


def _app(*, max_body_bytes: int = 1_000_000, clock: Callable[[], float] = lambda: NOW_S) -> FastAPI:
    """An instance's edge around echo routes (at a fixed clock unless told)."""
    app = FastAPI()

    @app.get("/{path:path}")
    async def echo_get(path: str) -> dict[str, str]:
        return {"path": path}

    @app.post("/{path:path}")
    async def echo_post(path: str, request: Request) -> dict[str, str]:
        return {"path": path, "body": (await request.body()).decode()}

    gate = ControlGate(SECRET, NAME, clock=clock)
    app.add_middleware(EdgeGuard, max_body_bytes=max_body_bytes, body_timeout_s=5.0, gate=gate)
    return app


def _answer(app: FastAPI, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            response = await client.request(method, path, **kwargs)
            await response.aread()
            return response

    return asyncio.run(call())


def _signed(
    method: str, target: str, body: bytes = b"", *, at: float = NOW_S, name: str = NAME
) -> dict[str, str]:
    return signed_headers(KEY, name, method, target, body=body, now_s=at)


def test_signed_calls_pass_and_everything_else_is_refused() -> None:
    app = _app()

    def status(method: str, path: str, **kwargs: Any) -> int:
        return _answer(app, method, path, **kwargs).status_code

    assert status("GET", "/info") == 401
    assert status("GET", "/info", headers=_signed("GET", "/info")) == 200
    assert status("GET", "/state?since=3", headers=_signed("GET", "/state?since=3")) == 200
    assert status("GET", "/state?since=4", headers=_signed("GET", "/state?since=3")) == 401
    assert status("GET", "/state", headers=_signed("GET", "/state?since=3")) == 401
    assert status("POST", "/info", headers=_signed("GET", "/info")) == 401
    assert status("GET", "/info", headers=_signed("GET", "/info", at=NOW_S - 31)) == 401
    assert status("GET", "/info", headers=_signed("GET", "/info", at=NOW_S + 29)) == 200
    body = b'{"text": "x"}'
    ok = _signed("POST", "/tokenize", body)
    assert status("POST", "/tokenize", content=body, headers=ok) == 200
    assert status("POST", "/tokenize", content=body, headers=ok) == 401  # replay
    other = _signed("POST", "/tokenize", body)
    assert status("POST", "/tokenize", content=b'{"text": "y"}', headers=other) == 401
    wrong = signed_headers(control_key(b"another secret of 32 bytes......"), NAME, "GET", "/info")
    assert status("GET", "/info", headers=wrong) == 401


def test_a_call_signed_for_another_instance_is_refused_with_the_reason() -> None:
    refused = _answer(_app(), "GET", "/state", headers=_signed("GET", "/state", name="pdp-0"))
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["type"] == "authentication_error"
    assert "signed for instance 'pdp-0', not for this one (pdd-0)" in error["message"]


def test_a_replayed_call_is_refused_with_the_reason() -> None:
    app = _app()
    headers = _signed("GET", "/state")
    assert _answer(app, "GET", "/state", headers=headers).status_code == 200
    replayed = _answer(app, "GET", "/state", headers=headers)
    assert replayed.status_code == 401
    assert "replayed control request" in replayed.json()["error"]["message"]


def _deployment(host: str, port: int) -> Deployment:
    spec = InstanceSpec(
        name=NAME, role=InstanceRole.PD_DECODE, cluster="pd", host=host, http_port=port
    )
    return Deployment(instances=(spec,))


def test_the_signer_signs_for_the_instance_its_url_names() -> None:
    app = _app(clock=time.time)

    async def call() -> list[int]:
        transport = httpx.ASGITransport(app=app)
        auth = ControlSigner(SECRET, _deployment("t", 80))
        async with httpx.AsyncClient(transport=transport, base_url="http://t", auth=auth) as c:
            answers = [
                await c.get("/state", params={"since": 7}),
                await c.post("/prefill", json={"token_ids": [1, 2, 3]}),
                await c.post("/prefill", json={"token_ids": [1, 2, 3]}),  # a new nonce
            ]
        return [a.status_code for a in answers]

    assert asyncio.run(call()) == [200, 200, 200]


def test_the_signer_refuses_a_url_that_is_no_instance() -> None:
    auth = ControlSigner(SECRET, _deployment("127.0.0.1", 8001))
    request = httpx.Request("GET", "http://127.0.0.1:8002/state")
    with pytest.raises(ValueError, match="not an instance of this deployment"):
        next(auth.sync_auth_flow(request))


async def _refused_unread(app: FastAPI, headers: dict[str, str]) -> tuple[int, bool]:
    """Run one POST /prefill through the ASGI app: (its status, whether any of its body was
    read before the answer; what is dropped after a 413 does not count)."""
    asked = False
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal asked
        asked = asked or not sent
        return {"type": "http.request", "body": b"x" * 100, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/prefill",
        "raw_path": b"/prefill",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    await app(scope, receive, send)
    return sent[0]["status"], asked


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),  # unsigned
        (_signed("POST", "/prefill", name="pdp-0"), 401),  # for another instance
        (_signed("POST", "/prefill", at=NOW_S - 600), 401),  # stale
        ({**_signed("POST", "/prefill"), "x-prfaas-nonce": "not hex"}, 401),
        ({**_signed("POST", "/prefill"), "content-length": str(10**12)}, 413),
    ],
    ids=["unsigned", "another instance", "stale", "bad nonce", "declared too large"],
)
def test_what_the_headers_refuse_is_refused_before_the_body_is_read(
    headers: dict[str, str], status: int
) -> None:
    assert asyncio.run(_refused_unread(_app(), headers)) == (status, False)


def test_a_chunked_body_crossing_the_limit_is_refused() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 600

    headers = _signed("POST", "/prefill", b"x" * 6000)
    answer = _answer(
        _app(max_body_bytes=1000), "POST", "/prefill", content=chunks(), headers=headers
    )
    assert answer.status_code == 413


def test_nonces_are_forgotten_only_after_they_can_no_longer_be_fresh() -> None:
    book = NonceBook(window_s=30.0)
    assert book.admit("a", 0.0) is Admission.FRESH
    assert book.admit("a", 59.0) is Admission.REPLAYED
    assert book.admit("a", 61.0) is Admission.FRESH  # a timestamp 61 s old is stale anyway


def test_a_full_nonce_book_refuses_rather_than_forgets_a_live_nonce() -> None:
    small = NonceBook(window_s=30.0, max_nonces=2)
    assert small.admit("a", 0.0) is Admission.FRESH
    assert small.admit("b", 1.0) is Admission.FRESH
    assert small.admit("c", 2.0) is Admission.FULL
    assert small.admit("a", 3.0) is Admission.REPLAYED  # still remembered
    assert small.admit("c", 61.0) is Admission.FRESH  # "a" expired: room again


_NAMES = st.from_regex(r"[A-Za-z0-9_.-]{1,64}", fullmatch=True)
_LATIN1 = st.text(st.characters(max_codepoint=255), max_size=30)
_CALLS = st.builds(
    ControlCall,
    instance=_NAMES,
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
    path=_LATIN1.map(lambda s: "/" + s),
    query=_LATIN1,
    body=st.binary(max_size=64),
    timestamp=st.integers(0, 10**11).map(str),
    nonce=st.binary(min_size=16, max_size=16).map(bytes.hex),
)
_FIELDS = [f.name for f in dataclasses.fields(ControlCall)]
_FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "instance": st.text(max_size=70),
    "method": st.text(max_size=8),
    "path": _LATIN1,
    "query": _LATIN1,
    "body": st.binary(max_size=64),
    "timestamp": st.text(max_size=14),
    "nonce": st.text(max_size=40),
}


@given(_CALLS, st.sampled_from(_FIELDS), st.data())
def test_any_change_to_any_bound_field_changes_the_signature(
    call: ControlCall, name: str, data: st.DataObject
) -> None:
    """Fields are length-prefixed: no change (even one moving bytes across a field
    boundary) keeps the signature."""
    value = data.draw(_FIELD_VALUES[name])
    assume(value != getattr(call, name))
    changed = dataclasses.replace(call, **{name: value})
    assert signature(KEY, changed) != signature(KEY, call)


def _scope(call: ControlCall, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": call.method,
        "path": call.path,
        "raw_path": call.path.encode("latin-1"),
        "query_string": call.query.encode("latin-1"),
        "headers": [(k.encode(), v.encode("latin-1")) for k, v in headers.items()],
    }


def _verdict(gate: ControlGate, call: ControlCall, headers: dict[str, str]) -> bool:
    scope = _scope(call, headers)
    try:
        gate.check_head(scope)
        gate.check_body(scope, call.body)
    except AuthenticationError:
        return False
    return True


_GATE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    **_FIELD_VALUES,
    "instance": _NAMES,
    "method": st.sampled_from(["GET", "POST", "PUT", "DELETE", "get"]),
    "path": _LATIN1.map(lambda s: "/" + s),
    "timestamp": st.integers(0, 10**11).map(str),
    "nonce": st.binary(min_size=16, max_size=16).map(bytes.hex),
}


@given(_CALLS, st.sampled_from(_FIELDS), st.data())
def test_an_instance_refuses_a_call_with_any_bound_field_changed(
    call: ControlCall, name: str, data: st.DataObject
) -> None:
    """A call as signed passes the gate once; the same signature on a call with one field
    changed (what a replay to another instance, path or body is) never does."""
    value = data.draw(_GATE_VALUES[name])
    assume(value != getattr(call, name))
    mac = signature(KEY, call)
    changed = dataclasses.replace(call, **{name: value})
    headers = {
        "x-prfaas-instance": changed.instance,
        "x-prfaas-timestamp": changed.timestamp,
        "x-prfaas-nonce": changed.nonce,
        "x-prfaas-signature": mac,
    }
    now_s = float(call.timestamp)
    assert not _verdict(ControlGate(SECRET, call.instance, clock=lambda: now_s), changed, headers)
    gate = ControlGate(SECRET, call.instance, clock=lambda: now_s)
    original = {
        "x-prfaas-instance": call.instance,
        "x-prfaas-timestamp": call.timestamp,
        "x-prfaas-nonce": call.nonce,
        "x-prfaas-signature": mac,
    }
    assert _verdict(gate, call, original)
    assert not _verdict(gate, call, original)  # the same call again: a replay
