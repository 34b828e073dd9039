"""An emulated attention-DP instance prefills as many prompts at once as its profile says
(`PerfProfile.prefill_concurrency`: one per rank, each at one prompt's latency), as the planner
rates it and the simulator runs it, and publishes that concurrency so the router's scheduler
counts each prompt as 1/d of the instance's time. Before, it ran them one by one: a DP8
instance planned at 8 prompts per latency served one. No assertion reads a clock: the layer
sleeps wait on a gate the test opens."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from serve_helpers import emulated_instance

from prfaas.serve import protocol as p
from prfaas.serve.backends import emulated
from prfaas.serve.backends.interface import PrefillDone
from prfaas.serve.config.deployment import Deployment, EmulationSpec, InstanceRole
from prfaas.serve.config.parallelism_spec import ParallelismSpec, TimingSpec
from prfaas.serve.profile import published_profile
from prfaas.specs import aic
from prfaas.specs.perf import PerfProfile
from prfaas.specs.timing import TimingSource

LANES = 4


@dataclass(frozen=True)
class _Lanes:
    """The catalog profile of the instance, prefilling `LANES` prompts at once."""

    inner: PerfProfile

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    @property
    def prefill_concurrency(self) -> int:
        return LANES


def _deployment(**instance: object) -> tuple[Deployment, emulated.InstanceSpec]:
    spec = emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200")
    spec = spec.model_copy(update=instance)
    decode = emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20")
    deployment = Deployment(
        model="qwen3-235b",
        emulation=EmulationSpec(time_factor=1.0, byte_factor=1e-6),
        instances=(spec, decode),
    )
    return deployment, spec


def _body(i: int) -> p.PrefillRequest:
    return p.PrefillRequest(
        request_id=f"r{i}",
        token_ids=[emulated.BOS_ID, *f"prompt {i} ".encode() * 50],
        sampling=p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0),
        decode_transfer_host="127.0.0.1",
        decode_transfer_port=1,
    )


def test_a_dp_instance_prefills_one_prompt_per_lane_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = emulated.instance_profile
    monkeypatch.setattr(emulated, "instance_profile", lambda d, s: _Lanes(real(d, s)))
    gate: asyncio.Event | None = None

    async def gated(loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
        assert gate is not None
        await gate.wait()

    monkeypatch.setattr(emulated, "_sleep_until", gated)
    deployment, spec = _deployment()
    backend = emulated.EmulatedBackend(deployment, spec)
    assert backend.info.timing is not None and backend.info.timing.concurrency == LANES

    async def run() -> tuple[tuple[int, int], list[bool]]:
        nonlocal gate
        gate = asyncio.Event()
        backend.start()
        try:
            loop = asyncio.get_running_loop()
            outs = [backend.prefill(loop, _body(i)) for i in range(LANES + 1)]
            for _ in range(10):  # let every lane take its job and reach its first layer
                await asyncio.sleep(0)
            held = (backend.num_running, backend.num_waiting)
            gate.set()
            done = []
            for out in outs:
                item = await out.get()
                while not isinstance(item, PrefillDone | Exception):
                    item = await out.get()
                done.append(isinstance(item, PrefillDone))
            return held, done
        finally:
            backend.stop()

    held, done = asyncio.run(run())
    assert held == (LANES, 1)  # LANES prefills run, the next waits for a lane
    assert done == [True] * (LANES + 1)


def test_the_router_reads_the_published_concurrency() -> None:
    body = p.TimingBody(
        source="s", lengths_tokens=[1, 2], prefill_s=[1.0, 2.0], cache_bytes=[1.0, 2.0],
        prefill_concurrency=8,
    )  # fmt: skip
    info = p.InstanceInfo.model_construct(kv_bytes_per_token=1.0, max_context_tokens=2)
    assert published_profile(body, info).prefill_concurrency == 8
    old = body.model_dump(exclude={"prefill_concurrency"})  # an instance that does not say
    assert published_profile(p.TimingBody(**old), info).prefill_concurrency == 1


@pytest.mark.skipif(aic.aic_version() is None, reason="aiconfigurator-core not installed")
def test_a_planned_dp_split_timed_by_aiconfigurator_gets_its_lanes() -> None:
    split = ParallelismSpec(tp=1, dp=LANES, ep=1)
    deployment, spec = _deployment(
        gpus_per_instance=LANES, parallelism=split, timing=TimingSpec(source=TimingSource.AIC)
    )
    backend = emulated.EmulatedBackend(deployment, spec)
    assert backend.profile.prefill_concurrency == LANES
    assert backend.info.timing is not None and backend.info.timing.concurrency == LANES
