"""Issue 26 item 2, live: a PrfaaS instance whose engine died is not asked again.

The emulated engine of `prfaas-0` is dead (`emulation.dead_engines`, the fault hook: every
tokenize, prefill and decode call there answers 502, as a dead vLLM child's instance does,
while its `/state` answers, so the router's polls see it up). Before the fix every long
prompt was placed on it three times and the client got 502, and every tokenization asked
it first and failed. Now a failed attempt excludes the instance for that request (the
retry goes to PD-P, `no-prfaas-instance`), tokenization falls back to another instance,
and its failures in a row count against it (`serve.router.breaker`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve.backends.emulated import BOS_ID
from prfaas.serve.config.deployment import EmulationSpec
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.router.breaker import FAILURES_TO_OPEN

LONG = "a much longer prompt " * 20  # 421 tokens > t = 128: PrfaaS


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    emulation = EmulationSpec(time_factor=0.01, byte_factor=1e-3, dead_engines=("prfaas-0",))
    with running(emulated_deployment(emulation=emulation), timeout_s=60) as launcher:
        yield launcher


def _admin(launcher: Launcher) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(
        launcher.url + "/admin/state", headers=launcher.admin_headers, timeout=10
    ).json()
    return state


@pytest.mark.e2e
def test_tokenization_falls_back_to_an_instance_whose_engine_answers(launcher: Launcher) -> None:
    body = {"model": "prfaas-1t", "prompt": "hello"}
    answer = httpx.post(launcher.url + "/tokenize", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokens"][1:] == list(b"hello")


@pytest.mark.e2e
def test_long_prompts_are_retried_on_pd_p_never_on_the_dead_instance_again(
    launcher: Launcher,
) -> None:
    for k in range(FAILURES_TO_OPEN + 2):
        prompt = [BOS_ID, *f"{k} {LONG}".encode()]  # token ids: no tokenization involved
        body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4}
        answer = httpx.post(launcher.url + "/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.json()["prfaas"]["path"] == "pd-p"
    decisions = _admin(launcher)["recent_decisions"]
    on_dead = [d for d in decisions if d["prefill_instance"] == "prfaas-0"]
    assert all(d["status"] == "failed" and d["retried"] for d in on_dead)
    # one attempt at most per request went to prfaas-0: each was followed by a PD-P one
    for before, after in itertools.pairwise(decisions):
        if before["prefill_instance"] == "prfaas-0":
            assert after["prefill_instance"] == "pdp-0"
            assert after["reason"] == "no-prfaas-instance"
    dead = next(i for i in _admin(launcher)["instances"] if i["name"] == "prfaas-0")
    assert dead["failures_in_a_row"] >= FAILURES_TO_OPEN
