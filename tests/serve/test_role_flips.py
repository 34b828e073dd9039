"""Role flips and the slow loop, live: real processes on loopback (emulated backend, no torch).

Deployment: PrfaaS h200, one PD-P and two PD-D on h20 (prfaas-1t at time_factor 1, so a
600-token decode is still running when the test flips its instance). No assertion reads a
clock; every wait is a bounded poll of /admin/state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import emulated_instance, running

from prfaas.serve.config.deployment import (
    Deployment,
    EmulationSpec,
    InstanceRole,
    RebalanceSpec,
    RouterSpec,
)
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

MODEL = "prfaas-1t"
SHORT = "a short prompt " * 4  # 61 tokens


def _deployment(threshold_tokens: int, rebalance: RebalanceSpec) -> Deployment:
    return Deployment(
        model=MODEL,
        threshold_tokens=threshold_tokens,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=1.0, byte_factor=1 / 1024),
        rebalance=rebalance,
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
            emulated_instance("pdd-1", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )


def _launch(deployment: Deployment) -> Iterator[Launcher]:
    with running(deployment, timeout_s=90) as launcher:
        yield launcher


def _state(launcher: Launcher) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(
        launcher.url + "/admin/state", headers=launcher.admin_headers, timeout=30
    ).json()
    return result


def _wait_for(launcher: Launcher, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll /admin/state until `ok` holds (bounded: 120 s; no assertion on the time)."""
    for _ in range(480):
        state = _state(launcher)
        if ok(state):
            return state
        time.sleep(0.25)
    raise AssertionError(f"never reached: {state}")


def _instance(state: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(i for i in state["instances"] if i["name"] == name)
    return found


def _complete(launcher: Launcher, prompt: str, max_tokens: int = 4) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
    response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _flip(launcher: Launcher, name: str, role: str) -> httpx.Response:
    url = f"{launcher.url}/admin/instances/{name}/role"
    return httpx.post(url, json={"role": role}, headers=launcher.admin_headers, timeout=30)


def _flip_done(name: str, role: str) -> Callable[[dict[str, Any]], bool]:
    def ok(state: dict[str, Any]) -> bool:
        inst = _instance(state, name)
        return bool(inst["role"] == role and not inst["draining"])

    return ok


# --- a flip by hand, with a request in flight ----------------------------------------------


@pytest.fixture(scope="module")
def manual() -> Iterator[Launcher]:
    yield from _launch(_deployment(100_000, RebalanceSpec(enabled=False)))


def test_a_decode_instance_flips_to_prefill_after_its_request_drains(manual: Launcher) -> None:
    lines: list[str] = []
    first = threading.Event()

    def stream() -> None:
        body = {"model": MODEL, "prompt": SHORT, "max_tokens": 600, "stream": True}
        body["stream_options"] = {"include_usage": True}
        with httpx.stream("POST", manual.url + "/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    lines.append(line)
                    first.set()

    client = threading.Thread(target=stream)
    client.start()
    try:
        assert first.wait(timeout=120)
        running = [d for d in _state(manual)["recent_decisions"] if d["status"] == "running"]
        busy = running[0]["decode_instance"]
        other = "pdd-1" if busy == "pdd-0" else "pdd-0"
        started = _flip(manual, busy, "pd-prefill")
        assert started.status_code == 202, started.text
        assert started.json()["status"] == "draining"
        during = _state(manual)
        assert _instance(during, busy)["draining"] and _instance(during, busy)["inflight"] >= 1
        assert _instance(during, busy)["role"] == "pd-decode"  # not switched under the request
        # new work avoids the draining instance; a second flip waits its turn
        assert _complete(manual, "meanwhile " * 7)["prfaas"]["decode_instance"] == other
        assert _flip(manual, "pdp-0", "pd-decode").status_code == 409
    finally:
        client.join(timeout=120)
    assert lines[-1] == "data: [DONE]" and '"error"' not in "".join(lines)
    assert '"completion_tokens": 600' in lines[-2]  # the in-flight request finished whole

    _wait_for(manual, _flip_done(busy, "pd-prefill"))
    # pdp-0 to decode: the flipped instance is now the only PD-P, so it must take the prefill
    assert _flip(manual, "pdp-0", "pd-decode").status_code == 202
    state = _wait_for(manual, _flip_done("pdp-0", "pd-decode"))
    assert [f["status"] for f in state["rebalance"]["flips"]] == ["done", "done"]
    later = _complete(manual, "later on " * 7)["prfaas"]
    assert later["path"] == "pd-p" and later["prefill_instance"] == busy
    assert later["decode_instance"] in {other, "pdp-0"}

    families = {
        f.name: f for f in text_string_to_metric_families(httpx.get(manual.url + "/metrics").text)
    }
    roles = {
        (s.labels["instance"], s.labels["role"]): s.value
        for s in families["prfaas:instance_role"].samples
    }
    assert roles[(busy, "pd-prefill")] == 1 and roles[(busy, "pd-decode")] == 0
    assert roles[("pdp-0", "pd-decode")] == 1
    flips = {
        (s.labels["instance"], s.labels["status"]): s.value
        for s in families["prfaas:role_flips"].samples
        if s.name.endswith("_total")
    }
    assert flips[(busy, "done")] == 1 and flips[("pdp-0", "done")] == 1


def test_bad_flip_requests_get_4xx(manual: Launcher) -> None:
    assert _flip(manual, "prfaas-0", "pd-decode").status_code == 400
    assert _flip(manual, "nobody", "pd-decode").status_code == 404
    assert _flip(manual, "pdd-0", "prfaas-prefill").status_code == 400
    bad = httpx.post(
        headers=manual.admin_headers,
        url=f"{manual.url}/admin/instances/pdd-0/role",
        content=b"{",
        timeout=30,
    )
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    role = _instance(_state(manual), "pdd-0")["role"]
    assert _flip(manual, "pdd-0", role).status_code == 409  # already that role
    assert (
        httpx.post(
            manual.url + "/admin/rebalance", headers=manual.admin_headers, timeout=30
        ).status_code
        == 409
    )  # disabled


# --- the periodic slow loop ----------------------------------------------------------------


@pytest.fixture(scope="module")
def periodic() -> Iterator[Launcher]:
    # One request at a time keeps PD-P busy for a part of each 1 s period only: the loop acts
    # only where a stage is busy (docs/scheduler.md), so this deployment calls 5% busy.
    spec = RebalanceSpec(period_s=1.0, min_samples=8, busy_utilisation=0.05)
    yield from _launch(_deployment(100_000, spec))


def test_the_slow_loop_moves_t_and_flips_a_decode_instance_to_prefill(periodic: Launcher) -> None:
    """Prefill-bound load (t far too high: every prompt at PD-P, decode idle, batch cap 16):
    the planner re-optimises t down and wants two PD-P instances of the three PD ones."""
    assert _state(periodic)["threshold_tokens"] == 100_000
    for i in range(40):  # once t moved (after the 8th), long prompts may go to PrfaaS
        _complete(periodic, f"prompt {i} " + "long context " * (20 + 40 * (i % 3)))
        if i >= 9 and _state(periodic)["rebalance"]["flips"]:
            break  # bounded: a window whose last period read idle is judged and held
    state = _wait_for(periodic, lambda s: len(s["rebalance"]["flips"]) >= 1)
    actions = {a["action"]: a for a in state["rebalance"]["recent_actions"] if "action" in a}
    assert actions["set-threshold"]["before"] == 100_000
    assert state["threshold_tokens"] == actions["set-threshold"]["after"] < 100_000
    assert (
        actions["flip-role"]["instance"] == "pdd-1" and actions["flip-role"]["to"] == "pd-prefill"
    )
    _wait_for(periodic, _flip_done("pdd-1", "pd-prefill"))
    text = httpx.get(periodic.url + "/metrics", timeout=30).text
    assert 'prfaas:rebalance_actions_total{action="set-threshold"' in text
    assert 'prfaas:instance_role{instance="pdd-1",role="pd-prefill"} 1.0' in text
