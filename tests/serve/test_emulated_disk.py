"""The emulated backend's disk tier (`serve.backends.emulated_disk`, issue 28).

A prompt computed on an emulated instance whose DRAM holds one prompt is pushed onto its disk
by a second one; asked again, its hit comes back from disk, promoted (events say so with
their medium) and charged the tier's read time for the model's real bytes x time_factor.
A disk slower than recomputing leaves the hit on disk and the prompt recomputed (the
simulator's rule, `scheduler.tiers.allocate_weighed`). No assertion reads a clock.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from serve_helpers import emulated_instance

from prfaas.kvcache import BlockStored, Medium, OutOfPages
from prfaas.serve.backends.emulated import BOS_ID, EmulatedBackend
from prfaas.serve.backends.interface import PrefillDone
from prfaas.serve.config.deployment import (
    Deployment,
    DiskTierSpec,
    EmulationSpec,
    InstanceRole,
    RouterSpec,
    load_deployment,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.protocol import Sampling

BLOCK = 512
TIME_FACTOR = 1e-4
DRAM_MIB = 512  # 60 pages: one prompt (51 pages: 4 blocks, 2 snapshots) fits, not two
FAST_MIB_PER_S = 1e9
SLOW_MIB_PER_S = 1e-6
RATE_MIB_PER_S = 1e6  # faster than recomputing a 4-block prompt on h20
SAMPLING = Sampling(max_tokens=1, temperature=0.0, top_p=1.0, top_k=0, seed=0)


def _prompt(letter: str) -> list[int]:
    return [BOS_ID, *([ord(letter)] * (4 * BLOCK + 10))]


def _backend(read_mib_per_s: float) -> EmulatedBackend:
    spec = emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20").model_copy(
        update={
            "capacity_mib": DRAM_MIB,
            "disk_tier": DiskTierSpec(capacity_mib=64 * 1024, read_mib_per_s=read_mib_per_s),
        }
    )
    deployment = Deployment(
        model="prfaas-1t",
        block_tokens=BLOCK,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=TIME_FACTOR),
        instances=(spec, emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20")),
        secret="unit-test-secret-0123456789",
    )
    return EmulatedBackend(deployment, spec)


async def _prefill(backend: EmulatedBackend, request_id: str, tokens: list[int]) -> int:
    out = backend.export(asyncio.get_running_loop(), request_id, tokens, SAMPLING)
    while True:
        item = await out.get()
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, PrefillDone):
            return item.hit_tokens


async def _again_after_eviction(backend: EmulatedBackend) -> tuple[int, list[Medium]]:
    """Hit tokens of prompt A asked again after B pushed it out of DRAM, and the media of the
    units stored meanwhile."""
    backend.start()
    try:
        assert await _prefill(backend, "a", _prompt("a")) == 0
        assert await _prefill(backend, "b", _prompt("b")) == 0
        before = backend.events_since(0)[1]
        hit = await _prefill(backend, "a2", _prompt("a"))
        events, _ = backend.events_since(before)
    finally:
        backend.stop()
    return hit, [e.event.medium for e in events if isinstance(e.event, BlockStored)]


def test_a_prefix_pushed_to_disk_is_promoted_back_and_charged_its_read() -> None:
    backend = _backend(FAST_MIB_PER_S)
    hit, stored = asyncio.run(_again_after_eviction(backend))
    assert hit == 4 * BLOCK
    assert Medium.DRAM in stored  # promoted units re-enter DRAM
    assert backend.pool.tier_counters.promoted_bytes > 0


def test_a_disk_slower_than_recompute_leaves_the_prefix_on_disk() -> None:
    backend = _backend(SLOW_MIB_PER_S)
    hit, _ = asyncio.run(_again_after_eviction(backend))
    assert hit == 0
    assert backend.pool.tier_counters.promoted_bytes == 0


def test_the_load_is_the_real_bytes_at_the_read_rate_times_the_time_factor() -> None:
    backend = _backend(RATE_MIB_PER_S)
    pool = backend.pool
    for name in "ab":  # a onto disk
        request = backend._request(name, _prompt(name), 0, imported=False)
        pool.allocate(request)
        pool.commit(request.request_id)
        pool.release(request.request_id)
    allocation, load_s = backend.disk.allocate(
        pool, backend._request("a2", _prompt("a"), 0, imported=False)
    )
    assert not isinstance(allocation, OutOfPages) and allocation.num_promoted_pages > 0
    pages_bytes = allocation.num_promoted_pages * pool.layout.page_bytes
    assert load_s == pytest.approx(pages_bytes / (RATE_MIB_PER_S * 2**20) * TIME_FACTOR)


def test_the_published_read_rate_is_in_the_timing_tables_units() -> None:
    backend = _backend(RATE_MIB_PER_S)
    e = backend.emulation
    assert backend.info.disk_read_bytes_per_s == pytest.approx(
        RATE_MIB_PER_S * 2**20 * e.byte_factor / e.time_factor
    )


BASE = "model: prfaas-1t\ninstances:\n"


@pytest.mark.parametrize(
    ("instance", "message"),
    [
        ("backend: emulated, chip: h20, disk_tier: {capacity_mib: 8, directory: /d}", "no files"),
        ("disk_tier: {capacity_mib: 8}", "needs a directory"),
        ("backend: vllm, disk_tier: {capacity_mib: 8}", "torch and emulated"),
    ],
)
def test_disk_tier_fields_are_checked_per_backend(
    tmp_path: Path, instance: str, message: str
) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(BASE + "  - {name: a, role: pd-prefill, cluster: pd, " + instance + "}\n")
    with pytest.raises(DeploymentError) as err:
        load_deployment(path)
    assert message in str(err.value)


def test_an_emulated_disk_tier_loads_without_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(
        BASE + "  - {name: a, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,"
        " disk_tier: {capacity_mib: 8}}\n"
    )
    spec = load_deployment(path).instances[0]
    assert spec.disk_tier is not None and spec.disk_tier.directory is None
