"""Replicas racing for one decode instance's room: the instance refuses what it cannot hold
and the router places the request elsewhere, once (real processes on loopback).

Another replica's request (the test, signing as a router does) fills pdd-0's KV receive
buffer and is not yet claimed: emulated `prfaas-1t` at `byte_factor` 0.6 ships ~109 MB for a
short prompt into a 128 MiB buffer, so a second one does not fit (tests/serve/
test_kv_buffer_full.py). The router, which ties to pdd-0, is refused there (503
kv_buffer_full) and places the request on pdd-1: one answer, one completed decode, nothing
held anywhere afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, emulated_instance, running

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import EmulationSpec, InstanceRole
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

MODEL = "prfaas-1t"
PROMPT = "a short prompt about the weather"


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    deployment = emulated_deployment(
        emulation=EmulationSpec(time_factor=0.001, byte_factor=0.6),
        instances=(
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
            emulated_instance("pdd-1", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )
    with running(deployment, timeout_s=120) as launcher:
        yield launcher


def _instance_state(launcher: Launcher, client: httpx.Client, name: str) -> dict[str, Any]:
    result: dict[str, Any] = client.get(launcher.deployment.instance(name).url + "/state").json()
    return result


def test_a_decode_instance_full_with_another_replicas_kv_sends_the_request_elsewhere(
    launcher: Launcher,
) -> None:
    tokens = httpx.post(
        launcher.url + "/tokenize", json={"model": MODEL, "prompt": PROMPT}, timeout=30
    ).json()["tokens"]
    decode = launcher.deployment.instance("pdd-0")
    other = p.PrefillRequest(
        request_id="other-replica-1",
        token_ids=tokens,
        sampling=p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0),
        decode_transfer_host=decode.host,
        decode_transfer_port=decode.transfer_port,
        router="another-replica",
    )
    with httpx.Client(auth=launcher.instance_auth(), timeout=60) as client:
        prefill_url = launcher.deployment.instance("pdp-0").url
        placed = client.post(
            prefill_url + "/prefill",
            content=other.model_dump_json(),
            headers={"content-type": "application/json"},
        )
        assert placed.status_code == 200, placed.text  # its KV waits in pdd-0 for its decode
        assert _instance_state(launcher, client, "pdd-0")["resources"]["unclaimed_kv"] == 1

        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4}
        answer = httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        state = httpx.get(
            launcher.url + "/admin/state", headers=launcher.admin_headers, timeout=30
        ).json()
        records = state["recent_decisions"]
        assert [(r["decode_instance"], r["status"]) for r in records] == [
            ("pdd-0", "failed"),
            ("pdd-1", "completed"),
        ]
        assert "no room" in records[0]["error"] and records[0]["retried"]
        by_name = {i["name"]: i for i in state["instances"]}
        assert by_name["pdd-0"]["failures_in_a_row"] == 0  # full, not broken

        client.post(decode.url + "/cancel", json={"request_id": "other-replica-1"})
        for name in ("pdp-0", "pdd-0", "pdd-1"):
            held = _instance_state(launcher, client, name)["resources"]
            assert held["unclaimed_kv"] == held["running_calls"] == held["held_pages"] == 0
