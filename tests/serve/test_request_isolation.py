"""Issue 14 item 1 in the router's flow: "this request failed" is not "this instance is down".

The router's calls go through an `httpx.MockTransport` that plays the instances: a request's
own error (4xx), an instance's 5xx, a call broken on a stale keep-alive connection (the
instance then answers its probe) and a dead instance (nothing answers). Only the last one may
take the instance out of service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from serve_helpers import fake_info

from prfaas.scheduler import RouteDecision
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.errors import BadRequestError
from prfaas.serve.instance.app import _transfer_failure
from prfaas.serve.router.attempts import InstanceDown, InstanceFull, RequestFailed
from prfaas.serve.router.flow import RouterRuntime, _prefill
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry
from prfaas.transfer.errors import AbortReason, TransferAbortedError

Handler = Callable[[httpx.Request], httpx.Response]
STATE = {
    "boot_id": "b",
    "num_waiting": 0,
    "num_running": 0,
    "free_pages": 1,
    "events": [],
    "next_seq": 0,
}


def _runtime(handler: Handler) -> RouterRuntime:
    deployment = default_deployment()
    client = HttpInstanceClient(transport=httpx.MockTransport(handler))
    registry = Registry(deployment, client)
    for inst in registry.instances.values():
        inst.info, inst.is_healthy = fake_info(inst.name), True
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


def _script(prefill: Callable[[httpx.Request], httpx.Response], *, up: bool) -> Handler:
    """Instances whose POST /prefill is `prefill` and whose GET /state answers when `up`."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/state":
            if not up:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(200, json=STATE)
        if request.url.path == "/prefill":
            return prefill(request)
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"token_ids": p.pack_token_ids([1, 2, 3])})
        return httpx.Response(404, json={"error": {"message": "no", "type": "x"}})

    return handle


def _decision(rt: RouterRuntime) -> RouteDecision:
    names = list(rt.registry.instances)
    fake = SimpleNamespace(
        request_id="cmpl-1", prefill_instance_id=names[0], decode_instance_id=names[-1]
    )
    return cast(RouteDecision, fake)


def _sampling() -> p.Sampling:
    return p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)


def _run_prefill(rt: RouterRuntime) -> Any:
    return asyncio.run(_prefill(rt, _decision(rt), [1, 2, 3], _sampling()))


def _error(status: int, message: str) -> Callable[[httpx.Request], httpx.Response]:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return lambda _: httpx.Response(status, json=body)


def _raise(kind: type[httpx.TransportError]) -> Callable[[httpx.Request], httpx.Response]:
    def fail(request: httpx.Request) -> httpx.Response:
        raise kind("broken", request=request)

    return fail


def _healthy(rt: RouterRuntime) -> dict[str, bool]:
    return {name: inst.is_healthy for name, inst in rt.registry.instances.items()}


def test_a_requests_own_error_is_passed_on_and_never_marks_the_instance() -> None:
    rt = _runtime(_script(_error(400, "seed out of range"), up=True))
    with pytest.raises(BadRequestError, match="seed out of range"):
        _run_prefill(rt)
    assert all(_healthy(rt).values())


def test_a_full_decode_buffer_is_room_lacking_not_a_failure_of_anyone() -> None:
    """The prefill instance's 503 `kv_buffer_full` (its transfer was refused `out_of_space`
    by the decode side): the attempt names the decode instance (excluded for this request,
    so `generate` answers 503, not 502, when no other decode instance can take it) and
    nobody's failure count moves."""
    body = {
        "error": {"message": "no room", "type": "service_unavailable", "code": "kv_buffer_full"}
    }
    rt = _runtime(_script(lambda _: httpx.Response(503, json=body), up=True))
    with pytest.raises(InstanceFull, match="no room") as full:
        _run_prefill(rt)
    assert full.value.instance == _decision(rt).decode_instance_id
    assert all(_healthy(rt).values())
    assert all(inst.breaker.failures_in_a_row == 0 for inst in rt.registry.instances.values())


def test_out_of_space_on_the_link_becomes_that_503() -> None:
    full = _transfer_failure(TransferAbortedError(AbortReason.OUT_OF_SPACE, "no pages"))
    assert (full.status_code, full.code) == (503, "kv_buffer_full")
    other = _transfer_failure(TransferAbortedError(AbortReason.STALLED, "no progress"))
    assert other.status_code == 502


def test_an_instance_5xx_fails_the_attempt_not_the_instance() -> None:
    rt = _runtime(_script(_error(500, "sampler blew up"), up=True))
    with pytest.raises(RequestFailed, match="sampler blew up"):
        _run_prefill(rt)
    assert all(_healthy(rt).values())


@pytest.mark.parametrize(
    "kind", [httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError, httpx.ReadTimeout]
)
def test_a_broken_call_to_an_instance_that_answers_its_probe_is_the_requests_failure(
    kind: type[httpx.TransportError],
) -> None:
    """The issue's chain: an error closes the keep-alive connection, the next call on it
    fails with ReadError. The instance answers its probe: it stays in service."""
    rt = _runtime(_script(_raise(kind), up=True))
    with pytest.raises(RequestFailed):
        _run_prefill(rt)
    assert all(_healthy(rt).values())


@pytest.mark.parametrize("kind", [httpx.ConnectError, httpx.ReadError, httpx.ConnectTimeout])
def test_a_broken_call_to_an_instance_that_fails_its_probe_marks_it_down(
    kind: type[httpx.TransportError],
) -> None:
    rt = _runtime(_script(_raise(kind), up=False))
    with pytest.raises(InstanceDown):
        _run_prefill(rt)
    prefill_name = _decision(rt).prefill_instance_id
    assert _healthy(rt)[prefill_name] is False
    assert sum(not ok for ok in _healthy(rt).values()) == 1


def test_tokenize_moves_on_without_marking_an_instance_that_is_up() -> None:
    calls: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.host + ":" + str(request.url.port) + request.url.path)
        if request.url.path == "/tokenize" and len(calls) == 1:
            raise httpx.ReadError("stale connection", request=request)
        if request.url.path == "/state":
            return httpx.Response(200, json=STATE)
        return httpx.Response(200, json={"token_ids": p.pack_token_ids([7, 8])})

    rt = _runtime(handle)
    assert asyncio.run(rt.prompts.encode("hello")) == [7, 8]
    assert all(_healthy(rt).values())
