"""The emulated backend sleeps to absolute deadlines: a prefill's layer steps are start + k x
step, so event-loop lateness never adds up (docs/validation.md). The deadlines it asks for
are recorded instead of slept; no assertion reads a clock."""

from __future__ import annotations

import asyncio

import pytest
from serve_helpers import emulated_instance

from prfaas.kvcache import KvSlice
from prfaas.serve import protocol as p
from prfaas.serve.backends import emulated
from prfaas.serve.backends.interface import PrefillDone
from prfaas.serve.config.deployment import Deployment, EmulationSpec, InstanceRole


def _backend() -> emulated.EmulatedBackend:
    spec = emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200")
    decode = emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20")
    deployment = Deployment(
        model="prfaas-1t",
        emulation=EmulationSpec(time_factor=0.5, byte_factor=1 / 4096),
        instances=(spec, decode),
    )
    return emulated.EmulatedBackend(deployment, spec)


def test_prefill_layer_steps_are_absolute_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    deadlines: list[float] = []

    async def record(loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        deadlines.append(deadline_s)
        await asyncio.sleep(0.002)  # a late wake-up each step: must not shift the next deadline

    monkeypatch.setattr(emulated, "_sleep_until", record)
    backend = _backend()
    tokens = [emulated.BOS_ID, *b"x" * 3000]
    sampling = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)

    async def run() -> list[object]:
        backend.start()
        try:
            body = p.PrefillRequest(
                request_id="r0",
                token_ids=tokens,
                sampling=sampling,
                decode_transfer_host="127.0.0.1",
                decode_transfer_port=1,
            )
            out = backend.prefill(asyncio.get_running_loop(), body)
            items: list[object] = []
            while not items or not isinstance(items[-1], PrefillDone):
                items.append(await out.get())
            return items
        finally:
            backend.stop()

    items = asyncio.run(run())
    slices = [i for i in items if isinstance(i, KvSlice)]
    num_layers = sum(group.num_layers for group in backend.model.mixers)
    assert len(deadlines) == len(slices) == num_layers
    step_s = backend.profile.prefill_s(len(tokens)) * 0.5 / len(slices)
    start_s = deadlines[0] - step_s
    assert deadlines == pytest.approx([start_s + (k + 1) * step_s for k in range(len(slices))])


def test_layers_already_due_are_handed_over_together() -> None:
    """At a tiny `time_factor` every layer is due by the time the prefill runs: its slices
    reach the queue in one go, with no loop turn per layer (a turn each, and a KV frame write
    each, was most of a zero-compute request's cost). Shown by order: when the consumer
    first wakes, every slice and the `PrefillDone` are already there."""
    spec = emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200")
    decode = emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20")
    deployment = Deployment(
        model="prfaas-1t",
        emulation=EmulationSpec(time_factor=1e-12, byte_factor=1e-6),
        instances=(spec, decode),
    )
    backend = emulated.EmulatedBackend(deployment, spec)
    sampling = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)
    body = p.PrefillRequest(
        request_id="r0",
        token_ids=[emulated.BOS_ID, *b"x" * 1000],
        sampling=sampling,
        decode_transfer_host="127.0.0.1",
        decode_transfer_port=1,
    )

    async def run() -> tuple[object, int]:
        backend.start()
        try:
            out = backend.prefill(asyncio.get_running_loop(), body)
            first = await out.get()
            return first, out.qsize()
        finally:
            backend.stop()

    first, waiting = asyncio.run(run())
    num_layers = sum(group.num_layers for group in backend.model.mixers)
    assert isinstance(first, KvSlice)
    assert waiting == num_layers  # the other slices and the PrefillDone
