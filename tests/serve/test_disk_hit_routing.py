"""The live router weighs a hit on an instance's disk by its load, as the simulator does.

Two PD-P emulated instances: `pdp-0` holds 16 blocks of a prompt on its disk tier, `pdp-1`
holds the first 4 of them in DRAM. The router's hits come from the global index (`Registry.
hit_tokens`) and are weighed with each instance's published timing and disk read rate
(`InstanceInfo.disk_read_bytes_per_s`) by the simulator's rule (`scheduler.tiers.
weighed_hits`). A disk slower than recomputing leaves `pdp-0` no hit, so the DRAM hit wins the
placement; a fast disk keeps the whole hit, which wins.
"""

from __future__ import annotations

import httpx
import pytest
from serve_helpers import emulated_instance

from prfaas.kvcache import BlockStored, CacheRequest, InstanceId, Medium, RequestId
from prfaas.kvcache.ids import ClusterId
from prfaas.kvcache.index import GlobalKVCacheIndex
from prfaas.scheduler import RouteRequest
from prfaas.scheduler.tiers import HitPricing, weighed_hits
from prfaas.serve.backends.emulated import BOS_ID, EmulatedBackend
from prfaas.serve.config.deployment import Deployment, EmulationSpec, InstanceRole, RouterSpec
from prfaas.serve.instance.runtime import build_runtime
from prfaas.serve.profile import published_profile
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

BLOCK = 512
PROMPT = [BOS_ID, *([ord("a") + i % 26 for i in range(16 * BLOCK + 100)])]
SLOW_DISK = 1.0  # a byte a second: any load costs more than recomputing
FAST_DISK = 1e15


def _deployment() -> Deployment:
    return Deployment(
        model="prfaas-1t",
        block_tokens=BLOCK,
        threshold_tokens=10**6,  # every prompt stays in the PD cluster
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=1.0, byte_factor=1 / 256),
        instances=(
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdp-1", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
        secret="unit-test-secret-0123456789",
    )


def _stored(deployment: Deployment, num_blocks: int, medium: Medium) -> list[BlockStored]:
    """The events of a pool that computed the first `num_blocks` blocks of PROMPT, each unit
    now held on `medium`."""
    pool = EmulatedBackend(deployment, deployment.instance("pdp-0")).pool
    tokens = PROMPT[: num_blocks * BLOCK + 1]
    hashes = pool.config.hash_scheme.hash_tokens(tokens[:-1])
    request = CacheRequest(RequestId("r"), hashes, len(tokens), takes_snapshots=True)
    pool.allocate(request)
    pool.commit(request.request_id)
    events = [e for e in pool.take_events() if isinstance(e, BlockStored)]
    return [BlockStored(e.instance_id, e.group_index, e.block_hash, medium) for e in events]


def _runtime(disk_read_bytes_per_s: float) -> RouterRuntime:
    deployment = _deployment()
    client = httpx.AsyncClient()
    registry = Registry(deployment, client)
    for spec in deployment.instances:
        live = registry.instances[spec.name]
        info = build_runtime(deployment, spec.name).info
        if spec.name == "pdp-0":
            info = info.model_copy(update={"disk_read_bytes_per_s": disk_read_bytes_per_s})
        live.info, live.is_healthy = info, True
    index = GlobalKVCacheIndex(registry.instances["pdp-0"].info.cache.identity())  # type: ignore[union-attr]
    for spec in deployment.instances:
        index.register_instance(InstanceId(spec.name), ClusterId(spec.cluster), index.identity)
    for name, num_blocks, medium in [("pdp-0", 16, Medium.DISK), ("pdp-1", 4, Medium.DRAM)]:
        events = _stored(deployment, num_blocks, medium)
        index.apply(
            [BlockStored(InstanceId(name), e.group_index, e.block_hash, medium) for e in events]
        )
    registry.index = index
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


def _placed(rt: RouterRuntime) -> tuple[dict[InstanceId, int], str]:
    hits = rt.registry.hit_tokens(PROMPT)
    route = RouteRequest(RequestId("q"), len(PROMPT), 8, hits)
    decision = rt.scheduler.route(route, rt.registry.view(0.0))
    return hits, str(decision.prefill_instance_id)  # type: ignore[union-attr]


def test_a_disk_hit_slower_than_recompute_loses_to_a_dram_hit_elsewhere() -> None:
    hits, chosen = _placed(_runtime(SLOW_DISK))
    assert hits == {InstanceId("pdp-0"): 0, InstanceId("pdp-1"): 4 * BLOCK}
    assert chosen == "pdp-1"


def test_a_disk_hit_faster_than_recompute_keeps_its_value_and_wins() -> None:
    hits, chosen = _placed(_runtime(FAST_DISK))
    assert hits[InstanceId("pdp-1")] == 4 * BLOCK
    assert 4 * BLOCK < hits[InstanceId("pdp-0")] <= 16 * BLOCK
    assert chosen == "pdp-0"


@pytest.mark.parametrize("rate", [SLOW_DISK, 5e5, FAST_DISK])
def test_the_router_weighs_as_the_simulator_rule_does(rate: float) -> None:
    rt = _runtime(rate)
    assert rt.registry.index is not None
    scheme = rt.registry.index.identity.scheme
    match = rt.registry.index.match(scheme.hash_tokens(PROMPT[:-1]), (len(PROMPT) - 1) // BLOCK)
    info = rt.registry.instances["pdp-0"].info
    assert info is not None
    profile = published_profile(info.timing, info)
    rates = {InstanceId("pdp-0"): rate, InstanceId("pdp-1"): None}
    expected = weighed_hits(match, BLOCK, len(PROMPT), lambda i: HitPricing(profile, rates[i]))
    assert rt.registry.hit_tokens(PROMPT) == expected
