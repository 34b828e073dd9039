"""The decode choice weighs the KV receive-buffer room each decode instance reports in
`/state` (`resources.receive_pages_free`): a decode instance whose buffer was full at the
last poll is passed over while another has room, so the request is not first sent to a
prefill that the full buffer refuses (`kv_buffer_full`) and then placed again. Before,
a full buffer was found only by that refused attempt."""

from __future__ import annotations

import asyncio

import pytest
from fake_instances import FakeInstanceClient
from serve_helpers import emulated_deployment

from prfaas.serve import protocol as p
from prfaas.serve.errors import ServeError
from prfaas.serve.router.flow import RouterRuntime, generate
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

SAMPLING = p.Sampling(max_tokens=2, temperature=0, top_p=1, top_k=0, seed=0, ignore_eos=True)
PROMPT = p.byte_prompt_ids("a short prompt, PD-P " * 2, add_special_tokens=True)


def _calls(receive_full: set[str]) -> list[tuple[str, str]]:
    """One PD-P request through a router over fakes with two decode instances, after one
    poll: its /prefill and /decode calls, (instance, endpoint) in order."""
    deployment = emulated_deployment(num_decode=2)
    instances = tuple(
        s.model_copy(update={"http_port": 1 + k, "transfer_port": 101 + k})
        for k, s in enumerate(deployment.instances)
    )
    deployment = deployment.model_copy(update={"instances": instances})
    fake = FakeInstanceClient(deployment, receive_full=receive_full)

    async def run() -> None:
        registry = Registry(deployment, fake)
        await registry.poll_once()
        rt = RouterRuntime(deployment, registry, RouterMetrics(), fake)
        async for _ in generate(rt, PROMPT, SAMPLING):
            pass

    asyncio.run(run())
    names = {s.url: s.name for s in instances}
    return [(names[c.url], c.endpoint) for c in fake.calls if c.endpoint in ("/prefill", "/decode")]


def test_a_full_receive_buffer_is_passed_over_without_a_refused_attempt() -> None:
    assert _calls(set()) == [("pdp-0", "/prefill"), ("pdd-1", "/decode")]  # a tie: by name
    assert _calls({"pdd-1"}) == [("pdp-0", "/prefill"), ("pdd-0", "/decode")]


def test_with_every_buffer_full_the_refusal_still_answers() -> None:
    """No decode instance reports room: one is tried as before, and its refusal is what
    the client gets (503: no other instance has room now)."""
    with pytest.raises(ServeError) as raised:
        _calls({"pdd-0", "pdd-1"})
    assert raised.value.status_code == 503 and "receive buffer is full" in str(raised.value)
