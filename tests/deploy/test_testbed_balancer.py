"""Three router replicas behind HAProxy on the test bed, the slow loop on (its lease shared
by the replicas): one is killed (SIGKILL) under load, any one, and then the lease holder.

The replicas carry on; the requests the lost one held fail with HAProxy's 502 whose body
says so (code `router_lost`, `deploy.balancer`), and no other request fails. Killing the
holder moves the slow-loop lease to another replica at a higher epoch, and the instances'
switch records show no flip under an older epoch after a newer one. The load is bounded:
WORKERS clients, at most REQUESTS_EACH requests each, one at a time."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from testbed_helpers import (
    LONG_PROMPT,
    SECOND_DECODE,
    SHORT_PROMPT,
    BedAdmin,
    BedClient,
    bed_client,
    bed_or_skip,
    needs_haproxy,
    running,
    start_balancer,
)

from prfaas.deploy.balancer import ROUTER_HEADER

pytestmark = pytest.mark.e2e
WORKERS = 6
REQUESTS_EACH = 10
KILL_AFTER = 2 * WORKERS  # answers before the kill
MAX_TOKENS = 48  # long enough that every replica holds requests at any moment
LEASE_BOUND_S = 90.0  # a liveness bound for each wait on the lease, not a speed assertion
LEASE_REQUESTS_EACH = 200  # a bound: the load stops once the lease has moved


@dataclass(frozen=True, slots=True)
class Outcome:
    started_s: float
    status: int
    router: str
    code: str | None


def _one(client: BedClient, url: str, prompt: str) -> Outcome:
    started_s = time.monotonic()
    body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    answer = client.http.post(url + "/v1/completions", json=body)
    code = answer.json()["error"]["code"] if answer.status_code != 200 else None
    return Outcome(started_s, answer.status_code, answer.headers.get(ROUTER_HEADER, ""), code)


def _worker(
    client: BedClient,
    url: str,
    n: int,
    out: list[Outcome],
    lock: threading.Lock,
    *,
    stop: threading.Event | None = None,
    limit: int = REQUESTS_EACH,
) -> None:
    """`limit` requests one at a time, fewer if `stop` is set first."""
    for i in range(limit):
        if stop is not None and stop.is_set():
            return
        outcome = _one(client, url, LONG_PROMPT if (n + i) % 2 else SHORT_PROMPT)
        with lock:
            out.append(outcome)


def test_killing_a_replica_fails_only_what_it_held(tmp_path: Path) -> None:
    needs_haproxy()
    with (
        bed_or_skip(tmp_path) as bed,
        running(bed, tmp_path, replicas=3) as deployed,
        bed_client(deployed, threads=WORKERS + 1) as client,
    ):
        url = start_balancer(deployed, tmp_path)
        outcomes: list[Outcome] = []
        lock = threading.Lock()
        workers = [client.submit(_worker, client, url, n, outcomes, lock) for n in range(WORKERS)]
        while len(outcomes) < KILL_AFTER:
            time.sleep(0.05)
        lost = deployed.routers[1]
        bed.kill(deployed.processes[lost])
        killed_s = time.monotonic()
        for worker in workers:
            worker.result()
    failed = [o for o in outcomes if o.status != 200]
    assert failed, "the lost replica held no request: the load was too light to show it"
    assert {(o.status, o.code, o.router) for o in failed} == {(502, "router_lost", lost)}
    after = [o for o in outcomes if o.started_s > killed_s]
    assert after and all(o.status == 200 for o in after)
    assert {o.router for o in after} == set(deployed.routers) - {lost}
    assert len(outcomes) == WORKERS * REQUESTS_EACH


def _holder(admin: BedAdmin, candidates: set[str], above_epoch: int = 0) -> tuple[str, int]:
    """The replica among `candidates` that holds the lease at an epoch above `above_epoch`,
    once one does (bounded by LEASE_BOUND_S); never two at once."""
    deadline = time.monotonic() + LEASE_BOUND_S
    while True:
        leases = {r: s["lease"] for r in sorted(candidates) if (s := admin.state(r)) is not None}
        held = {r: lease["epoch"] for r, lease in leases.items() if lease["held"]}
        assert len(held) <= 1, f"two replicas hold the slow-loop lease: {held}"
        if held and max(held.values()) > above_epoch:
            [(router, epoch)] = held.items()
            return router, epoch
        assert time.monotonic() < deadline, f"no holder above epoch {above_epoch}: {leases}"
        time.sleep(0.25)


def _flip(admin: BedAdmin, holder: str, instance: str, role: str) -> None:
    """A flip by hand through the holder, until the instance has switched and no live
    replica still sees it draining (bounded by LEASE_BOUND_S)."""
    answer = admin.flip(holder, instance, role)
    assert answer.status_code == 202, answer.text
    _within_bound(f"{instance} {role}", lambda: _switched(admin, instance, role))


def _within_bound(what: str, ok: Callable[[], bool]) -> None:
    """Poll `ok` until it is true (bounded by LEASE_BOUND_S; no timing asserted)."""
    deadline = time.monotonic() + LEASE_BOUND_S
    while not ok():
        assert time.monotonic() < deadline, f"not {what} after {LEASE_BOUND_S} s"
        time.sleep(0.25)


def _switched(admin: BedAdmin, instance: str, role: str) -> bool:
    if admin.instance(instance, "GET", "/state").json()["role"] != role:
        return False
    states = [admin.state(r) for r in admin.deployed.routers]
    views = [next(i for i in s["instances"] if i["name"] == instance) for s in states if s]
    return all(v["role"] == role and not v["draining"] for v in views)


def _lease(admin: BedAdmin, instance: str) -> dict[str, Any]:
    """The instance's lease book (`/state` `lease`)."""
    found: dict[str, Any] = admin.instance(instance, "GET", "/state").json()["lease"]
    return found


def _has_granted(admin: BedAdmin, instance: str, epoch: int) -> bool:
    return int(_lease(admin, instance)["epoch"]) >= epoch


def _switch_epochs(admin: BedAdmin) -> dict[str, list[int]]:
    """Each instance's role switches, oldest first, as the epochs they were made under."""
    names = [p.pod for p in admin.deployed.pods if p.container == "instance"]
    return {n: [s["epoch"] for s in _lease(admin, n)["switches"]] for n in names}


def test_killing_the_lease_holder_moves_the_lease_and_fences_its_flips(tmp_path: Path) -> None:
    """The holder flips pdd-1 to PD prefill; SIGKILLed under load, another replica takes the
    lease at a higher epoch (the hand-over time is printed, not asserted) while every
    request but those the holder held is served; the old epoch's flip is then refused by
    the instance (409 `stale_epoch`), the new holder flips pdd-1 back, and every instance's
    switches run in epoch order."""
    needs_haproxy()
    with (
        bed_or_skip(tmp_path) as bed,
        running(bed, tmp_path, replicas=3, extra_instances=SECOND_DECODE) as deployed,
        bed_client(deployed, threads=WORKERS + 1) as client,
    ):
        url = start_balancer(deployed, tmp_path)
        admin = BedAdmin(deployed, client)
        replica_ids = {r: (admin.state(r) or {})["lease"]["replica"] for r in deployed.routers}
        holder, old_epoch = _holder(admin, set(deployed.routers))
        _flip(admin, holder, "pdd-1", "pd-prefill")
        outcomes: list[Outcome] = []
        lock, stop = threading.Lock(), threading.Event()
        work = functools.partial(
            _worker, out=outcomes, lock=lock, stop=stop, limit=LEASE_REQUESTS_EACH
        )
        workers = [client.submit(work, client, url, n) for n in range(WORKERS)]
        while len(outcomes) < WORKERS and not any(w.done() for w in workers):
            time.sleep(0.05)
        bed.kill(deployed.processes[holder])
        killed_s = time.monotonic()
        taker, new_epoch = _holder(admin, set(deployed.routers) - {holder}, old_epoch)
        moved_s = time.monotonic()
        handover_s = moved_s - killed_s
        print(f"slow-loop lease hand-over on the bed after SIGKILL: {handover_s:.2f} s")
        stop.set()
        for worker in workers:
            worker.result()
        granted = functools.partial(_has_granted, admin, "pdd-1", new_epoch)
        _within_bound(f"epoch {new_epoch} granted by pdd-1", granted)  # fenced there from now
        stale = admin.instance("pdd-1", "POST", "/role", {"role": "pd-decode", "epoch": old_epoch})
        _flip(admin, taker, "pdd-1", "pd-decode")
        epochs = _switch_epochs(admin)
    assert all(i.startswith(f"{r}-") for r, i in replica_ids.items()), replica_ids  # own hosts
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_epoch"
    assert epochs["pdd-1"] == [old_epoch, new_epoch]
    assert all(e == sorted(e) for e in epochs.values()), epochs
    lost = [o for o in outcomes if o.status != 200]
    print(f"through HAProxy: {len(outcomes)} requests, {len(lost)} lost with the holder")
    assert {(o.status, o.code, o.router) for o in lost} <= {(502, "router_lost", holder)}
    after = [o for o in outcomes if o.started_s > killed_s]
    assert all(o.status == 200 for o in after)
    assert {o.router for o in after} <= set(deployed.routers) - {holder}
    assert any(o.started_s < moved_s for o in after), "no request sent during the hand-over"
