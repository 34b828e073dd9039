"""The rendered deployment across two datacenters on one host (`deploy.testbed`): every pod
in a network namespace of its own with its own address, started with its rendered command
line and environment; the datacenters joined by a tbf-shaped veth with a user-space RTT.

Each test builds its own bed (fresh namespace names, its own subnet inside them) and checks
on the way out that nothing of it is left (`testbed_helpers.bed_or_skip`)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from testbed_helpers import (
    LONG_PROMPT,
    SHORT_PROMPT,
    WAN,
    BedClient,
    bed_client,
    bed_or_skip,
    running,
)

from prfaas.deploy import testbed
from prfaas.deploy.bed_deployment import BedDeployment
from prfaas.deploy.testbed import open_testbed, unavailable_reason
from prfaas.serve.backends.emulated import EmulatedBackend, output_token
from prfaas.serve.config.deployment import load_deployment

pytestmark = pytest.mark.e2e
T = TypeVar("T")
MAX_TOKENS = 8


def _single_instance_text(deployment_file: Path, prompt: str) -> str:
    """What one emulated instance generates for `prompt` on its own (greedy)."""
    deployment = load_deployment(deployment_file)
    backend = EmulatedBackend(deployment, deployment.instance("pdd-0"))
    ids = backend.encode(prompt)
    return backend.detokenize([output_token(ids, i, backend.script) for i in range(MAX_TOKENS)])


def test_each_path_crosses_the_namespaces_with_one_instances_text(tmp_path: Path) -> None:
    with bed_or_skip(tmp_path) as bed, running(bed, tmp_path) as deployed:
        [router] = deployed.routers
        with bed_client(deployed) as client:
            for prompt, path in ((SHORT_PROMPT, "pd-p"), (LONG_PROMPT, "prfaas")):
                answer = client.complete(deployed.router_url(router), prompt, MAX_TOKENS)
                assert answer.status_code == 200, answer.text
                assert answer.json()["prfaas"]["path"] == path
                expected = _single_instance_text(tmp_path / "deployment.yaml", prompt)
                assert answer.json()["choices"][0]["text"] == expected
        hosts = {deployed.hosts[p.pod] for p in deployed.pods}
        assert len({h.netns for h in hosts}) == len({h.address for h in hosts}) == 4
        datacenters = {p.cluster: deployed.hosts[p.pod].datacenter for p in deployed.pods}
        assert datacenters == {"prfaas": 0, "pd": 1}


def test_a_failing_body_leaves_nothing_behind(tmp_path: Path) -> None:
    """Namespaces (and the veths and bridges inside them: none is ever made in the root
    namespace), hosts files, processes and what they forked, the delay line: all gone
    although the body raised."""
    if (reason := unavailable_reason(WAN)) is not None:
        pytest.skip(reason)
    with pytest.raises(RuntimeError, match="the body failed"), open_testbed(WAN, tmp_path) as bed:
        host = bed.add_host("h", 0)
        bed.resolve({"h.example": host.address})
        bed.start(host, ["sh", "-c", "sleep 600 & sleep 600"], {"PATH": os.environ["PATH"]})
        kept = bed
        raise RuntimeError("the body failed")
    assert kept.leftovers() == []


def test_each_host_has_its_own_host_name(tmp_path: Path) -> None:
    """As Kubernetes names each pod's host after the pod: a process in a host sees the
    host's name (so a router replica's id starts with its pod's), and this machine's own
    host name is untouched."""
    if (reason := unavailable_reason(WAN)) is not None:
        pytest.skip(reason)
    ours = socket.gethostname()
    with open_testbed(WAN, tmp_path) as bed:
        hosts = [bed.add_host("prfaas-router-0", 1), bed.add_host("pdd-0", 1)]
        env = {"PATH": os.environ["PATH"]}
        for process in [bed.start(host, ["hostname"], env) for host in hosts]:
            assert process.wait() == 0
        named = {h.name: (tmp_path / f"{h.name}.log").read_text().strip() for h in hosts}
    assert named == {"prfaas-router-0": "prfaas-router-0", "pdd-0": "pdd-0"}
    assert socket.gethostname() == ours
    assert bed.leftovers() == []


CUT_BOUND_S = 90.0  # a liveness bound for each phase, not a speed assertion
CAUGHT = 4  # long prompts sent the moment the WAN is cut


def _long(client: BedClient, url: str, n: int) -> tuple[int, str, str]:
    """A long prompt of its own (no prefix shared with another: no cache hit shortens it):
    (status, path, reason)."""
    answer = client.complete(url, f"{n} {LONG_PROMPT}", MAX_TOKENS)
    served = answer.json().get("prfaas", {}) if answer.status_code == 200 else {}
    return answer.status_code, served.get("path", ""), served.get("reason", "")


def test_a_cut_wan_sends_long_prompts_pd_p_until_it_is_back(tmp_path: Path) -> None:
    """The router sits in the PD datacenter and polls the PrfaaS instance across the WAN:
    once a cut silences it, the instance is out of routing and long prompts go PD-P
    (reason `no-prfaas-instance`). Requests caught on the cut (sent at once, before a poll
    has noticed) are served too: the router gives up on the silent instance and places them
    again. When the WAN is back the instance answers its polls, and the first long prompt
    after it is healthy again crosses the WAN: the calls that failed while it was silent
    do not keep it out (`Registry.request_failed`)."""
    with bed_or_skip(tmp_path) as bed, running(bed, tmp_path) as deployed:
        url = deployed.router_url(deployed.routers[0])
        with bed_client(deployed) as client:
            assert _long(client, url, 0)[:2] == (200, "prfaas")
            bed.cut_wan()
            caught = [client.submit(_long, client, url, n) for n in range(1, CAUGHT + 1)]
            during = _until(lambda n: _long(client, url, n), "no-prfaas-instance", first=100)
            assert {f.result()[0] for f in caught} == {200}
            assert deployed.get_status(url + "/health") == 200  # degraded: PD-P serves
            bed.restore_wan()
            _wait_healthy(deployed, client, url, "prfaas-0")
            assert _long(client, url, 1000)[:2] == (200, "prfaas")
        assert {status for status, _, _ in during} == {200}


def _wait_healthy(deployed: BedDeployment, client: BedClient, url: str, name: str) -> None:
    """Until the router reports instance `name` healthy (its `/admin/state`)."""
    [token] = {p.env["PRFAAS_ADMIN_TOKEN"] for p in deployed.pods if p.container == "router"}
    deadline = time.monotonic() + CUT_BOUND_S
    headers = {"authorization": f"Bearer {token}"}
    while True:
        answer = client.call(lambda: client.http.get(url + "/admin/state", headers=headers))
        healthy = {i["name"]: i["healthy"] for i in answer.json()["instances"]}
        if healthy[name]:
            return
        assert time.monotonic() < deadline, f"{name} not healthy after {CUT_BOUND_S} s"
        time.sleep(0.2)


def _until(
    ask: Callable[[int], tuple[int, str, str]], reason: str, *, first: int
) -> list[tuple[int, str, str]]:
    """Ask until three answers in a row have `reason`, within CUT_BOUND_S."""
    answers: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + CUT_BOUND_S
    n = first
    while len(answers) < 3 or any(r != reason for _, _, r in answers[-3:]):
        assert time.monotonic() < deadline, f"still {answers[-3:]} after {CUT_BOUND_S} s"
        answers.append(ask(n))
        n += 1
    return answers


def test_the_wan_is_cut_silently_and_comes_back(tmp_path: Path) -> None:
    """A connection across the WAN: made; during a cut it times out (nothing answers,
    nothing refuses); restored, made again; a killed delay line cuts the return path and
    `restore_wan` brings it back too."""
    if (reason := unavailable_reason(WAN)) is not None:
        pytest.skip(reason)
    with open_testbed(WAN, tmp_path) as bed:
        near, far = bed.add_host("near", 1), bed.add_host("far", 0)
        listener = _in(bed, far, lambda: socket.create_server((far.address, 0)))
        port = listener.getsockname()[1]

        def connect() -> str:
            try:
                _in(bed, near, lambda: socket.create_connection((far.address, port), 1.0)).close()
            except TimeoutError:
                return "timed out"
            except OSError as err:
                return err.strerror or "failed"
            return "connected"

        assert connect() == "connected"
        bed.cut_wan()
        assert connect() == "timed out"  # silent: no refusal, no ICMP
        bed.restore_wan()
        assert connect() == "connected"
        assert bed.delay_line is not None
        bed.delay_line.process.kill()
        bed.delay_line.process.wait()
        assert connect() != "connected"
        bed.restore_wan()
        assert connect() == "connected"
        listener.close()
    assert bed.leftovers() == []


def _in(bed: testbed.Testbed, host: testbed.Host, work: Callable[[], T]) -> T:
    """`work()` on a thread inside `host` (its sockets are made there)."""
    with ThreadPoolExecutor(1, initializer=bed.enter, initargs=(host,)) as pool:
        return pool.submit(work).result()
