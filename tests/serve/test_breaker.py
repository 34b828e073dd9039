"""Issue 26 item 2: an instance is taken out by its own failures (`serve.router.breaker`).

Its engine died, its shell still answers `/state`: every request placed on it failed. The
breaker opens after `threshold` failures in a row, for `cooldown_s`, then lets the next
request decide. Time is a number passed in.
"""

from __future__ import annotations

import asyncio

import httpx
from httpx import MockTransport
from hypothesis import given
from hypothesis import strategies as st
from serve_helpers import fake_info

from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.router.breaker import FAILURES_TO_OPEN, FailureBreaker
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.registry import Registry


def test_three_failures_in_a_row_open_it_for_the_cooldown_then_one_try_decides() -> None:
    b = FailureBreaker(threshold=3, cooldown_s=10.0)
    b.failed(0.0)
    b.failed(1.0)
    assert not b.is_open(1.0)
    b.failed(2.0)
    assert b.is_open(2.0) and b.is_open(11.9) and not b.is_open(12.0)
    b.failed(12.5)  # half-open: the one try failed, out again at once
    assert b.is_open(12.5) and not b.is_open(22.5)
    b.succeeded()
    b.failed(23.0)
    assert not b.is_open(23.0)


@given(st.lists(st.booleans(), max_size=30), st.integers(1, 5))
def test_it_is_open_exactly_after_threshold_failures_since_the_last_success(
    outcomes: list[bool], threshold: int
) -> None:
    b = FailureBreaker(threshold=threshold, cooldown_s=5.0)
    run = 0
    for t, ok in enumerate(outcomes):
        if ok:
            b.succeeded()
            run = 0
        else:
            b.failed(float(t))
            run += 1
        assert b.is_open(float(t)) is (run >= threshold)


def test_a_restarted_instance_starts_with_a_closed_breaker() -> None:
    """Its own failures took it out; a new process (new boot_id) is a new start."""
    boot = {"id": "first"}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            return httpx.Response(
                200, content=fake_info("any", boot_id=boot["id"]).model_dump_json()
            )
        state = {"boot_id": boot["id"], "num_waiting": 0, "num_running": 0, "free_pages": 1}
        return httpx.Response(200, json={**state, "events": [], "next_seq": 0})

    async def run() -> Registry:
        registry = Registry(
            default_deployment(), HttpInstanceClient(transport=MockTransport(handle))
        )
        await registry.poll_once()
        for _ in range(FAILURES_TO_OPEN):
            registry.request_failed("prfaas-0")
        assert not registry.instances["prfaas-0"].is_accepting
        await registry.poll_once()  # the same process: still out
        assert not registry.instances["prfaas-0"].is_accepting
        boot["id"] = "second"
        await registry.poll_once()
        return registry

    registry = asyncio.run(run())
    inst = registry.instances["prfaas-0"]
    assert inst.restarts == 1 and inst.is_accepting and inst.breaker.failures_in_a_row == 0


def test_calls_failing_while_an_instance_is_unreachable_do_not_keep_it_out() -> None:
    """A WAN cut: the polls mark the instance down; the calls caught in flight fail after
    that; once its polls answer again it is back at once (no breaker cooldown)."""
    is_reachable = {"now": True}

    def handle(request: httpx.Request) -> httpx.Response:
        if not is_reachable["now"]:
            raise httpx.ConnectTimeout("the WAN is cut", request=request)
        if request.url.path == "/info":
            return httpx.Response(200, content=fake_info("any").model_dump_json())
        state = {"boot_id": "b", "num_waiting": 0, "num_running": 0, "free_pages": 1}
        return httpx.Response(200, json={**state, "events": [], "next_seq": 0})

    async def run() -> Registry:
        client = HttpInstanceClient(transport=MockTransport(handle))
        registry = Registry(default_deployment(), client)
        await registry.poll_once()
        is_reachable["now"] = False
        await registry.poll_once()
        assert not registry.instances["prfaas-0"].is_healthy
        for _ in range(FAILURES_TO_OPEN):  # the calls caught on the cut time out now
            registry.request_failed("prfaas-0")
        is_reachable["now"] = True
        await registry.poll_once()
        return registry

    assert asyncio.run(run()).instances["prfaas-0"].is_accepting
