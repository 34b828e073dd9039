"""Overload at the router is an honest 429 with Retry-After, never a wrong answer or an
outage: the in-flight limit on a live deployment, an unknown context that is not 0, and
health judged by the instances' own failures, not by the router's slowness."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import emulated_deployment, emulated_instance, running

from prfaas.serve.config.deployment import InstanceRole, RouterSpec, default_deployment
from prfaas.serve.errors import NoCapacityError
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.router.flow import RouterRuntime, check_length
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.overload import STALL_S, LoopWatch
from prfaas.serve.router.registry import Registry

MAX_INFLIGHT = 4
BURST = 60


@pytest.fixture(scope="module")
def limited() -> Iterator[Launcher]:
    """The issue's deployment (router, one PD-P, one PD-D, near-zero compute) with a small
    in-flight limit."""
    deployment = emulated_deployment(
        time_factor=0.001,
        router=RouterSpec(port=0, max_inflight_requests=MAX_INFLIGHT),
        instances=(
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )
    with running(deployment, timeout_s=120) as launcher:
        yield launcher


async def _burst(url: str) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:

        async def one(i: int) -> httpx.Response:
            stream = i % 2 == 1
            body = {"model": "prfaas-1t", "prompt": f"burst {i} " * 40, "max_tokens": 16}
            return await client.post(url + "/v1/completions", json={**body, "stream": stream})

        return await asyncio.gather(*(one(i) for i in range(BURST)))


@pytest.mark.e2e
def test_a_burst_past_the_limit_gets_200_or_429_and_the_instances_stay_up(
    limited: Launcher,
) -> None:
    responses = asyncio.run(_burst(limited.url))
    statuses = [r.status_code for r in responses]
    assert set(statuses) <= {200, 429}, [r.text for r in responses if r.status_code != 200]
    refused = [r for r in responses if r.status_code == 429]
    assert refused and 200 in statuses
    for r in refused:
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        assert "max_inflight_requests" in r.json()["error"]["message"]
    health = httpx.get(limited.url + "/health", timeout=30).json()
    assert health == {"status": "ok", "healthy": 2}
    state = httpx.get(limited.url + "/admin/state", headers=limited.admin_headers, timeout=30)
    assert all(i["healthy"] for i in state.json()["instances"])
    metrics = httpx.get(limited.url + "/metrics", timeout=30).text
    assert f'prfaas:requests_total{{outcome="rejected",status="429"}} {len(refused)}.0' in metrics
    # the limit frees as requests end: one request alone is served
    body = {"model": "prfaas-1t", "prompt": "after the burst", "max_tokens": 4}
    assert httpx.post(limited.url + "/v1/completions", json=body, timeout=60).status_code == 200


def _registry(handler: httpx.MockTransport) -> tuple[Registry, HttpInstanceClient]:
    client = HttpInstanceClient(transport=handler)
    registry = Registry(default_deployment(), client, LoopWatch())
    for inst in registry.instances.values():
        inst.is_healthy = True
    return registry, client


def _healthy_after_poll(fail: httpx.HTTPError, *, stall_s: float = 0.0) -> bool:
    """Whether the first instance stays healthy after a poll that fails with `fail`, the
    router's loop blocked for `stall_s` during the call."""

    async def answer(request: httpx.Request) -> httpx.Response:
        time.sleep(stall_s)  # the router's loop busy elsewhere: nothing else runs meanwhile
        raise fail

    async def run() -> bool:
        registry, client = _registry(httpx.MockTransport(answer))
        watch = asyncio.create_task(registry.watch.run())
        await asyncio.sleep(0.1)  # the watch is asleep, on time
        async with client:
            await registry.poll_once()
        watch.cancel()
        return next(iter(registry.instances.values())).is_healthy

    return asyncio.run(run())


def test_a_refused_or_timed_out_poll_marks_the_instance_down() -> None:
    assert not _healthy_after_poll(httpx.ConnectError("refused"))
    assert not _healthy_after_poll(httpx.ReadTimeout("no answer"))


def test_the_routers_own_slowness_never_marks_an_instance_down() -> None:
    assert _healthy_after_poll(httpx.ReadTimeout("late"), stall_s=2 * STALL_S)
    assert _healthy_after_poll(httpx.PoolTimeout("every connection busy"))
    # a refusal is the instance's, however busy the router was
    assert not _healthy_after_poll(httpx.ConnectError("refused"), stall_s=2 * STALL_S)


def test_an_unknown_context_is_503_not_a_400_about_the_prompt() -> None:
    deployment = default_deployment()
    client = HttpInstanceClient()
    registry = Registry(deployment, client)  # no instance has registered: no context known
    rt = RouterRuntime(deployment, registry, RouterMetrics(), client)
    with pytest.raises(NoCapacityError, match="context is unknown"):
        check_length(rt, [1] * 385, 16)
