"""The rendered deployment across two datacenters on one host (`deploy.testbed`): every pod
in a network namespace of its own with its own address, started with its rendered command
line and environment; the datacenters joined by a tbf-shaped veth with a user-space RTT.

Each test builds its own bed (fresh namespace names, its own subnet inside them) and checks
on the way out that nothing of it is left (`testbed_helpers.bed_or_skip`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

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

from prfaas.deploy.testbed import open_testbed, unavailable_reason
from prfaas.serve.backends.emulated import EmulatedBackend, output_token
from prfaas.serve.config.deployment import load_deployment

pytestmark = pytest.mark.e2e
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


CUT_BOUND_S = 90.0  # a liveness bound for each phase, not a speed assertion


def _long(client: BedClient, url: str, n: int) -> tuple[int, str, str]:
    """A long prompt of its own (no prefix shared with another: no cache hit shortens it):
    (status, path, reason)."""
    answer = client.complete(url, f"{n} {LONG_PROMPT}", MAX_TOKENS)
    served = answer.json().get("prfaas", {}) if answer.status_code == 200 else {}
    return answer.status_code, served.get("path", ""), served.get("reason", "")


def test_a_cut_wan_sends_long_prompts_pd_p_until_it_is_back(tmp_path: Path) -> None:
    """The router sits in the PD datacenter and polls the PrfaaS instance across the WAN:
    once a cut silences it, the instance is out of routing and long prompts go PD-P
    (reason `no-prfaas-instance`); when the WAN is back it answers its polls again and long
    prompts cross it again. Every request is served, the one caught on the cut included
    (the router gives up on its PrfaaS call and places it again)."""
    with bed_or_skip(tmp_path) as bed, running(bed, tmp_path) as deployed:
        url = deployed.router_url(deployed.routers[0])
        with bed_client(deployed) as client:
            assert _long(client, url, 0)[:2] == (200, "prfaas")
            bed.cut_wan()
            during = _until(lambda n: _long(client, url, n), "no-prfaas-instance", first=1)
            assert deployed.get_status(url + "/health") == 200  # degraded: PD-P serves
            bed.restore_wan()
            after = _until(lambda n: _long(client, url, n), "", first=1000, path="prfaas")
        assert {status for status, _, _ in during + after} == {200}
        assert [reason for _, _, reason in during[-3:]] == ["no-prfaas-instance"] * 3


def _until(
    ask: Callable[[int], tuple[int, str, str]], reason: str, *, first: int, path: str = ""
) -> list[tuple[int, str, str]]:
    """Ask until three answers in a row have `reason` (or `path`), within CUT_BOUND_S."""
    answers: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + CUT_BOUND_S
    n = first
    while len(answers) < 3 or not all(
        (r == reason) if reason else (p == path) for _, p, r in answers[-3:]
    ):
        assert time.monotonic() < deadline, f"still {answers[-3:]} after {CUT_BOUND_S} s"
        answers.append(ask(n))
        n += 1
    return answers
