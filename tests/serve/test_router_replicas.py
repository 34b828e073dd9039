"""Three router replicas over one set of emulated instances, real processes on loopback.

Exactly one replica holds the slow-loop lease; a flip by hand goes through the holder only;
the instances refuse a stale epoch's flip (fencing); SIGKILL the holder and another replica
takes the lease (the hand-over time is printed, not asserted: every wait is a bounded poll).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from serve_helpers import emulated_deployment

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import (
    ADMIN_TOKEN_ENV_VAR,
    RebalanceSpec,
    child_environment,
)
from prfaas.serve.launch.launcher import Launcher, die_with_parent
from prfaas.serve.launch.ports import hold_port

pytestmark = pytest.mark.e2e

MODEL = "prfaas-1t"


@dataclass
class Replicas:
    launcher: Launcher  # the instances and the first router
    urls: list[str]
    processes: list[subprocess.Popen[bytes]]  # the first router's is the launcher's child

    def state(self, url: str) -> dict[str, Any] | None:
        try:
            response = httpx.get(url + "/admin/state", headers=self.launcher.admin_headers)
        except httpx.HTTPError:
            return None
        result: dict[str, Any] = response.json()
        return result

    def holders(self) -> list[int]:
        """The replicas (by index) that say they hold the lease now (dead ones say nothing)."""
        states = [(i, self.state(url)) for i, url in enumerate(self.urls) if self.alive(i)]
        return [i for i, s in states if s is not None and s["lease"]["held"]]

    def alive(self, index: int) -> bool:
        return self.processes[index].poll() is None

    def instance_state(self, name: str) -> dict[str, Any]:
        spec = self.launcher.deployment.instance(name)
        with httpx.Client(auth=self.launcher.instance_auth()) as client:
            result: dict[str, Any] = client.get(spec.url + "/state?since=0").json()
        return result


def _extra_router(launcher: Launcher, where: Path) -> tuple[str, subprocess.Popen[bytes]]:
    held = hold_port("127.0.0.1")
    port = held.getsockname()[1]
    router = launcher.deployment.router.model_copy(update={"port": port})
    raw = launcher.deployment.model_copy(update={"router": router}).model_dump(mode="json")
    path = where / f"router-{port}.yaml"
    path.write_text(yaml.safe_dump(raw))
    env = child_environment(launcher.deployment)
    env[ADMIN_TOKEN_ENV_VAR] = launcher.admin_token
    process = subprocess.Popen(
        [sys.executable, "-m", "prfaas", "router", str(path), "--quiet"],
        env=env,
        stdout=subprocess.DEVNULL,
        preexec_fn=die_with_parent,  # noqa: PLW1509
    )
    held.close()  # the router binds beside it (SO_REUSEADDR) or has bound already
    return f"http://127.0.0.1:{port}", process


def _wait(what: str, ok: Callable[[], Any], tries: int = 480) -> Any:
    """Poll `ok` until it returns something truthy (bounded: 120 s; no timing asserted)."""
    for _ in range(tries):
        found = ok()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture(scope="module")
def replicas() -> Iterator[Replicas]:
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "e2e-test-secret-0123456789")
    deployment = emulated_deployment(num_decode=2, rebalance=RebalanceSpec(period_s=3600))
    launcher = Launcher(deployment)
    launcher.start()
    extra: list[subprocess.Popen[bytes]] = []
    try:
        launcher.wait_healthy(timeout_s=90)
        with tempfile.TemporaryDirectory() as where:
            urls = [launcher.url]
            for _ in range(2):
                url, process = _extra_router(launcher, Path(where))
                urls.append(url)
                extra.append(process)
            group = Replicas(launcher, urls, [launcher.children["router"], *extra])
            for url in urls:
                _wait(f"{url} healthy", lambda u=url: _health_ok(u))
            yield group
    finally:
        for process in extra:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        launcher.stop()


def _health_ok(url: str) -> bool:
    try:
        return httpx.get(url + "/health").json().get("status") == "ok"
    except httpx.HTTPError:
        return False


def _flip(url: str, launcher: Launcher, name: str, role: str) -> httpx.Response:
    return httpx.post(
        f"{url}/admin/instances/{name}/role",
        json={"role": role},
        headers=launcher.admin_headers,
        timeout=30,
    )


def _role_is(group: Replicas, name: str, role: str) -> bool:
    """The instance has `role`, and every live replica sees it so, with no drain left."""
    if group.instance_state(name)["role"] != role:
        return False
    for i, url in enumerate(group.urls):
        state = group.state(url) if group.alive(i) else None
        if state is None:
            continue
        inst = next(x for x in state["instances"] if x["name"] == name)
        if inst["role"] != role or inst["draining"]:
            return False
    return True


def test_every_replica_serves_and_exactly_one_holds_the_lease(replicas: Replicas) -> None:
    holders = _wait("one holder", lambda: replicas.holders() or None)
    assert len(holders) == 1
    for url in replicas.urls:
        body = {"model": MODEL, "prompt": "hello there " * 8, "max_tokens": 4}
        response = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
    epochs = {replicas.state(url)["lease"]["epoch"] for url in replicas.urls}  # type: ignore[index]
    assert len(replicas.holders()) <= 1 and max(epochs) >= 1  # never two


def test_only_the_holder_flips_and_instances_fence_a_stale_epoch(replicas: Replicas) -> None:
    launcher = replicas.launcher
    (holder,) = _wait("one holder", lambda: replicas.holders() or None)
    other = next(i for i in range(3) if i != holder)
    refused = _flip(replicas.urls[other], launcher, "pdd-1", "pd-prefill")
    assert refused.status_code == 409 and "lease" in refused.json()["error"]["message"]
    epoch = replicas.state(replicas.urls[holder])["lease"]["epoch"]  # type: ignore[index]
    spec = launcher.deployment.instance("pdd-1")
    with httpx.Client(auth=launcher.instance_auth()) as client:
        for stale in ({"epoch": epoch - 1} if epoch > 1 else {}, {}):
            answer = client.post(spec.url + "/role", json={"role": "pd-prefill", **stale})
            assert answer.status_code == 409 and answer.json()["error"]["code"] == "stale_epoch"
    assert _flip(replicas.urls[holder], launcher, "pdd-1", "pd-prefill").status_code == 202
    _wait("the flip", lambda: _role_is(replicas, "pdd-1", "pd-prefill"))
    switches = replicas.instance_state("pdd-1")["lease"]["switches"]
    assert [(s["epoch"], s["to_role"]) for s in switches] == [(epoch, "pd-prefill")]


def test_the_lease_moves_when_its_holder_is_killed(replicas: Replicas) -> None:
    launcher = replicas.launcher
    (holder,) = _wait("one holder", lambda: replicas.holders() or None)
    old_epoch = replicas.state(replicas.urls[holder])["lease"]["epoch"]  # type: ignore[index]
    killed_s = time.monotonic()
    replicas.processes[holder].send_signal(signal.SIGKILL)
    replicas.processes[holder].wait(timeout=30)
    (taker,) = _wait("a new holder", lambda: replicas.holders() or None, tries=240)
    print(f"slow-loop lease hand-over after SIGKILL: {time.monotonic() - killed_s:.2f} s")
    assert taker != holder
    new_epoch = replicas.state(replicas.urls[taker])["lease"]["epoch"]  # type: ignore[index]
    assert new_epoch > old_epoch
    # the new holder flips pdd-1 back; the instance's record shows each flip's epoch, in order
    assert _flip(replicas.urls[taker], launcher, "pdd-1", "pd-decode").status_code == 202
    _wait("the flip back", lambda: _role_is(replicas, "pdd-1", "pd-decode"))
    switches = replicas.instance_state("pdd-1")["lease"]["switches"]
    epochs = [s["epoch"] for s in switches]
    assert epochs == sorted(epochs) and epochs[-1] == new_epoch
    survivors = [url for i, url in enumerate(replicas.urls) if replicas.alive(i)]
    for url in survivors:
        body = {"model": MODEL, "prompt": "after the hand-over " * 6, "max_tokens": 4}
        assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200


def test_every_replica_stops_placing_on_an_instance_the_holder_drains(
    replicas: Replicas,
) -> None:
    """A decode call held open on pdd-0 (its KV never comes) keeps the holder's flip
    draining; every live replica then shows pdd-0 draining (the instance says so in /state)
    and places nothing there; once the call ends the flip completes."""
    launcher = replicas.launcher
    (holder,) = _wait("one holder", lambda: replicas.holders() or None)
    decode = launcher.deployment.instance("pdd-0")
    sampling = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)
    held = p.DecodeCall(
        request_id="held-open", token_ids=[1, 2, 3], first_token=4, sampling=sampling
    )

    def hold() -> None:
        """Until /cancel ends it (the instance then breaks the stream off)."""
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.Client(auth=launcher.instance_auth(), timeout=120) as client,
        ):
            headers = {"content-type": "application/json"}
            client.post(decode.url + "/decode", content=held.model_dump_json(), headers=headers)

    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(hold)
        _wait("the call", lambda: replicas.instance_state("pdd-0")["active_decodes"] == 1)
        assert _flip(replicas.urls[holder], launcher, "pdd-0", "pd-prefill").status_code == 202
        _wait("every replica sees the drain", lambda: _draining_everywhere(replicas, "pdd-0"))
        for i, url in enumerate(replicas.urls):
            if replicas.alive(i):
                body = {"model": MODEL, "prompt": f"while draining {i} " * 6, "max_tokens": 4}
                answer = httpx.post(url + "/v1/completions", json=body, timeout=60)
                assert (
                    answer.status_code == 200
                    and answer.json()["prfaas"]["decode_instance"] == "pdd-1"
                )
        with httpx.Client(auth=launcher.instance_auth(), timeout=30) as client:
            client.post(decode.url + "/cancel", json={"request_id": "held-open"})
        call.result(timeout=120)
    _wait("the flip", lambda: _role_is(replicas, "pdd-0", "pd-prefill"))
    assert not replicas.instance_state("pdd-0")["draining"]


def _draining_everywhere(group: Replicas, name: str) -> bool:
    states = [group.state(url) for i, url in enumerate(group.urls) if group.alive(i)]
    return all(
        s is not None and next(x for x in s["instances"] if x["name"] == name)["draining"]
        for s in states
    )


def test_concurrent_flips_on_every_replica_run_at_most_one(replicas: Replicas) -> None:
    """The same flip asked of every live replica at once: the holder takes it, the rest
    refuse; the instance records one switch for it."""
    launcher = replicas.launcher
    _wait("one holder", lambda: replicas.holders() or None)
    before = len(replicas.instance_state("pdd-0")["lease"]["switches"])
    live = [url for i, url in enumerate(replicas.urls) if replicas.alive(i)]
    with ThreadPoolExecutor(len(live)) as pool:
        flips = pool.map(lambda url: _flip(url, launcher, "pdd-0", "pd-decode"), live)
        answers = [response.status_code for response in flips]
    assert sorted(answers) == [202] + [409] * (len(live) - 1)
    _wait("the flip", lambda: _role_is(replicas, "pdd-0", "pd-decode"))
    assert len(replicas.instance_state("pdd-0")["lease"]["switches"]) == before + 1
