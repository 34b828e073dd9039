"""Live: an emulated PD-P instance whose DRAM holds one prompt, with a disk tier below it
(issue 28), as real processes on loopback behind the router.

A prompt pushed out of DRAM by a second one comes back from disk when asked again (its cached
tokens say so) when the disk reads faster than recomputing; with a disk slower than
recomputing the instance recomputes it (cached 0). No assertion reads a clock.
"""

from __future__ import annotations

import openai
import pytest
from serve_helpers import emulated_instance, running

from prfaas.serve.config.deployment import (
    Deployment,
    DiskTierSpec,
    EmulationSpec,
    InstanceRole,
    RouterSpec,
)

pytestmark = pytest.mark.e2e

BLOCK = 512
PROMPT_A = "a" * (4 * BLOCK + 9)  # 4 full blocks before the last token (<bos> counts one)
PROMPT_B = "b" * (4 * BLOCK + 9)


def _deployment(read_mib_per_s: float) -> Deployment:
    prefill = emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20").model_copy(
        update={
            "capacity_mib": 512,  # 60 pages: one prompt (51) fits, not two
            "disk_tier": DiskTierSpec(capacity_mib=8192, read_mib_per_s=read_mib_per_s),
        }
    )
    return Deployment(
        model="prfaas-1t",
        block_tokens=BLOCK,
        threshold_tokens=10**6,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=1e-3),
        instances=(prefill, emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20")),
    )


def _cached_again(read_mib_per_s: float) -> int:
    """Prompt A's cached tokens after B pushed it onto disk."""
    with running(_deployment(read_mib_per_s), timeout_s=120) as launcher:
        client = openai.OpenAI(base_url=launcher.url + "/v1", api_key="none", max_retries=0)
        cached = []
        for prompt in (PROMPT_A, PROMPT_B, PROMPT_A):
            out = client.completions.create(model="prfaas-1t", prompt=prompt, max_tokens=2)
            assert out.usage is not None and out.usage.prompt_tokens_details is not None
            cached.append(out.usage.prompt_tokens_details.cached_tokens or 0)
    assert cached[:2] == [0, 0]
    return cached[2]


def test_a_prefix_pushed_to_disk_is_served_from_it_through_the_router() -> None:
    assert _cached_again(read_mib_per_s=1e6) == 4 * BLOCK


def test_a_disk_slower_than_recompute_is_not_read() -> None:
    assert _cached_again(read_mib_per_s=1e-6) == 0
