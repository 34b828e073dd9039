"""A decode instance whose KV receive buffer has no room is full, not broken (issue 26:
`KV transfer failed: out_of_space` reached clients as 502 and counted against instances).

Emulated instances ship KV of its real size times `byte_factor`: `prfaas-1t` holds ~182 MB of
linear-attention state per request and ~17.3 KB of KV per token, so at 0.6 a 4,000-token
prompt ships ~151 MB, more than a decode instance's 128 MiB receive buffer, and is refused
`out_of_space` every time, while a short prompt's ~109 MB fits.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import emulated_deployment, emulated_instance, running

from prfaas.serve.config.deployment import EmulationSpec, InstanceRole
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    deployment = emulated_deployment(
        emulation=EmulationSpec(time_factor=0.001, byte_factor=0.6),
        instances=(
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )
    with running(deployment, timeout_s=120) as launcher:
        yield launcher


def _complete(launcher: Launcher, prompt: str) -> httpx.Response:
    body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4}
    return httpx.post(launcher.url + "/v1/completions", json=body, timeout=120)


def test_a_prompt_whose_kv_has_no_room_is_503_and_the_instances_stay_in_service(
    launcher: Launcher,
) -> None:
    refused = _complete(launcher, "y" * 4000)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["message"].count("no room") >= 1, refused.text
    state = httpx.get(
        launcher.url + "/admin/state", headers=launcher.admin_headers, timeout=10
    ).json()
    by_name = {inst["name"]: inst for inst in state["instances"]}
    assert by_name["pdd-0"]["failures_in_a_row"] == 0 and by_name["pdp-0"]["failures_in_a_row"] == 0
    short = _complete(launcher, "a short prompt")
    assert short.status_code == 200, short.text
    health = httpx.get(launcher.url + "/health", timeout=10).json()
    assert health["status"] == "ok", health
