"""Issue 26 item 1, live: clients that leave at any moment leave nothing behind.

A real deployment (router, PrfaaS prefill, PD-P, PD-D; emulated prfaas-1t at real speed, so
a long prefill takes about half a second and its KV crosses a real transfer link) takes
requests whose clients leave at a random moment: before placement, during the prefill,
during the transfer, between prefill and decode, during the decode, or never. Short prompts
run on PD-P, long ones on PrfaaS; some stream. Afterwards every instance's `/state` must be
back at idle: no pool page held, the receive buffer whole, no unclaimed KV, no transfer in
either direction, no prefill call, nothing queued or running; and the router holds nothing.

Before the fix the prefill of a client that had left ran on, its KV landed in the decode
instance's receive buffer and stayed there for good (issue 26: `out_of_space: no pages`).
The wait for idle is bounded well below the decode side's 60 s lifetime for unclaimed KV
(`serve.instance.kv_claims`), so the router's `/cancel` is what this test checks, not the
safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_helpers import emulated_deployment, running

from prfaas.serve import protocol as p
from prfaas.serve.launch.launcher import Launcher

IDLE_WAIT_S = 20.0  # well below UNCLAIMED_KV_TTL_S (60 s)
MODEL = "prfaas-1t"


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    with running(emulated_deployment(time_factor=1.0), timeout_s=60) as launcher:
        yield launcher


def _states(launcher: Launcher) -> dict[str, p.InstanceState]:
    auth = launcher.instance_auth()
    return {
        spec.name: p.InstanceState.model_validate_json(
            httpx.get(f"{spec.url}/state?since={2**62}", auth=auth, timeout=10).content
        )
        for spec in launcher.deployment.instances
    }


def _busy(state: p.InstanceState) -> dict[str, int]:
    """What an instance still holds for requests (empty when it is idle)."""
    r = state.resources
    held = {
        "num_waiting": state.num_waiting,
        "num_running": state.num_running,
        "active_prefills": state.active_prefills,
        "active_decodes": state.active_decodes,
        "held_pages": r.held_pages,
        "receive_pages_taken": r.receive_pages - r.receive_pages_free,
        "unclaimed_kv": r.unclaimed_kv,
        "incoming_transfers": r.incoming_transfers,
        "outgoing_transfers": r.outgoing_transfers,
        "running_calls": r.running_calls,
    }
    return {k: v for k, v in held.items() if v}


def _router_busy(launcher: Launcher) -> dict[str, Any]:
    state = httpx.get(launcher.url + "/admin/state", headers=launcher.admin_headers).json()
    inflight = {i["name"]: i["inflight"] for i in state["instances"] if i["inflight"]}
    running = [d for d in state["recent_decisions"] if d["status"] == "running"]
    return {"inflight": inflight, "running": running} if inflight or running else {}


def _wait_idle(launcher: Launcher) -> None:
    deadline = time.monotonic() + IDLE_WAIT_S
    while True:
        busy = {n: b for n, s in _states(launcher).items() if (b := _busy(s))}
        router = _router_busy(launcher)
        if not busy and not router:
            return
        assert time.monotonic() < deadline, f"still held: {busy} {router}"
        time.sleep(0.2)


async def _leave_after(url: str, body: dict[str, Any], leave_after_s: float) -> None:
    """Send the request and read it (streamed or not) until done or `leave_after_s`, then
    leave: the connection is closed, as a client that resets."""
    async with httpx.AsyncClient(timeout=60) as client:

        async def read() -> None:
            async with client.stream("POST", url + "/v1/completions", json=body) as r:
                async for _ in r.aiter_bytes():
                    pass

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read(), leave_after_s)


CLIENT = st.fixed_dictionaries(
    {
        # 20..70 tokens: PD-P (t = 128); 400..3200: PrfaaS
        "prompt_tokens": st.one_of(st.integers(20, 70), st.integers(400, 3200)),
        "max_tokens": st.integers(1, 40),
        "stream": st.booleans(),
        "leave_after_s": st.floats(0.0, 1.5),
    }
)


@pytest.mark.e2e
@settings(max_examples=8, deadline=None)
@given(st.lists(CLIENT, min_size=1, max_size=6))
def test_clients_that_leave_at_any_moment_leave_nothing_behind(
    launcher: Launcher, clients: list[dict[str, Any]]
) -> None:
    async def run() -> None:
        await asyncio.gather(
            *(
                _leave_after(
                    launcher.url,
                    {
                        "model": MODEL,
                        "prompt": "x" * (c["prompt_tokens"] - 1),
                        "max_tokens": c["max_tokens"],
                        "stream": c["stream"],
                    },
                    c["leave_after_s"],
                )
                for c in clients
            )
        )

    asyncio.run(run())
    _wait_idle(launcher)


@pytest.mark.e2e
def test_after_a_wave_of_departures_mid_prefill_long_prompts_still_succeed(
    launcher: Launcher,
) -> None:
    """The issue's wave, scaled down: 24 clients with 3.2K-token prompts leave mid-prefill;
    then the deployment is idle and a long prompt gets its answer."""

    async def wave() -> None:
        body = {"model": MODEL, "prompt": "y" * 3199, "max_tokens": 16}
        await asyncio.gather(*(_leave_after(launcher.url, body, 0.3) for _ in range(24)))

    asyncio.run(wave())
    _wait_idle(launcher)
    body = {"model": MODEL, "prompt": "z" * 3199, "max_tokens": 4}
    answer = httpx.post(launcher.url + "/v1/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["prfaas"]["path"] == "prfaas"
