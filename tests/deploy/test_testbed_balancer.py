"""Three router replicas behind HAProxy on the test bed: one is killed (SIGKILL) under load.

The replicas carry on; the requests the lost one held fail with HAProxy's 502 whose body
says so (code `router_lost`, `deploy.balancer`), and no other request fails. The load is
bounded: WORKERS clients, REQUESTS_EACH requests each, one at a time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from testbed_helpers import (
    LONG_PROMPT,
    SHORT_PROMPT,
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


def _worker(client: BedClient, url: str, n: int, out: list[Outcome], lock: threading.Lock) -> None:
    for i in range(REQUESTS_EACH):
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
