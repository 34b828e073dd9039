"""What a prefix hit is worth when part of it lies on a slower tier (issue 28).

A hit held in DRAM saves its prefill outright. A hit whose deeper blocks lie on disk saves
their compute only at the price of reading them back, so it is worth what it saves:

    with the load     T_prefill(l - hit) + load_s          load_s = bytes below DRAM / read rate
    without it        T_prefill(l - dram)                  dram   = hit - lower tokens

The hit is valued as the reuse r whose prefill alone costs what the loaded hit costs,
T_prefill(l - r) = T_prefill(l - hit) + load_s, so every caller that compares instances by
`T_prefill(l - reuse)` (routing, `choose_prefill`, the ledger) weighs the load without knowing
of tiers. When loading costs at least the recompute, the hit is worth its DRAM part only and
the instance caps its match there (`capped_request`), so the router and the instance agree.
Without a lower tier nothing lies below DRAM and every hit keeps its full value.

The router's side is `weighed_hits`: every instance's hit in a global-index match, each
weighed with that instance's prefill timing and tier read rate (`HitPricing`). The simulator
(`sim.runner`), the pool-aware hit model (`scheduler.hit_model`) and the live router
(`serve.router.registry`, the rate each instance publishes in its `/info`) all call it, so a
disk hit is weighed by one rule wherever a request is placed. The instance's side is
`allocate_weighed` (`capped_request`, then the allocation; `promotion_s` for the load) for
`sim.instances`, the hit model and the emulated backend's disk tier; the scenario files' tier
settings are read by `lower_tier_of`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from prfaas.kvcache.cache import HybridPrefixCache
from prfaas.kvcache.ids import InstanceId
from prfaas.kvcache.index import IndexMatch
from prfaas.kvcache.layout import PageLayout
from prfaas.kvcache.tiers import Medium, TierSpec
from prfaas.kvcache.values import Allocation, CacheRequest, OutOfPages, PrefixMatch
from prfaas.planner.scenario import SimulationFile
from prfaas.specs.perf import PerfProfile

GIB = 2**30


def lower_tier_of(simulation: SimulationFile | None) -> TierSpec | None:
    """The disk tier a scenario's `simulation:` section configures (None: DRAM only)."""
    if simulation is None or simulation.prefix_cache_disk_gib <= 0:
        return None
    return TierSpec(
        Medium.DISK,
        int(simulation.prefix_cache_disk_gib * GIB),
        simulation.disk_read_gib_per_s * GIB,
        simulation.disk_write_gib_per_s * GIB,
    )


def valued_hit_tokens(
    profile: PerfProfile, input_tokens: int, hit_tokens: int, lower_tokens: int, load_s: float
) -> int:
    """The reuse, in tokens, that a hit of `hit_tokens` (`lower_tokens` of them below DRAM,
    `load_s` to read back) is worth on an instance of `profile` (module docstring)."""
    if lower_tokens <= 0 or hit_tokens <= 0:
        return hit_tokens
    dram_tokens = max(0, hit_tokens - lower_tokens)
    loaded_s = profile.prefill_s(input_tokens - hit_tokens) + load_s
    if loaded_s >= profile.prefill_s(input_tokens - dram_tokens):
        return dram_tokens
    low, high = dram_tokens, hit_tokens  # prefill_s(l - r) falls as r grows
    while low < high:
        middle = (low + high + 1) // 2
        if profile.prefill_s(input_tokens - middle) >= loaded_s:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass(frozen=True, slots=True)
class HitPricing:
    """What weighing one instance's hit needs: its prefill timing (seconds and cache bytes by
    length) and the read rate of the tier below its DRAM, in those bytes per second of that
    timing (None: nothing lies below DRAM, every hit keeps its full value)."""

    profile: PerfProfile
    read_bytes_per_s: float | None


def weighed_hits(
    match: IndexMatch,
    block_tokens: int,
    input_tokens: int,
    pricing: Callable[[InstanceId], HitPricing],
) -> dict[InstanceId, int]:
    """Each instance's hit in `match` (instances without one left out), the part of it below
    DRAM weighed by its load (`valued_hit_tokens`); `pricing` is asked only for instances
    whose hit reaches below DRAM."""
    hits: dict[InstanceId, int] = {}
    for instance_id, blocks in match.per_instance.items():
        if not blocks:
            continue
        hit = min(blocks * block_tokens, input_tokens)
        lower = min(match.lower_blocks.get(instance_id, 0) * block_tokens, hit)
        if lower:
            price = pricing(instance_id)
            if price.read_bytes_per_s is not None:
                load_s = int(price.profile.cache_bytes(lower)) / price.read_bytes_per_s
                hit = valued_hit_tokens(price.profile, input_tokens, hit, lower, load_s)
        hits[instance_id] = hit
    return hits


def lower_positions(match: PrefixMatch) -> int:
    """Hit blocks of `match` with a unit below DRAM (an attention block at that position, or
    the snapshot at the hit's boundary): what `IndexMatch.lower_blocks` says for the pool."""
    return len({p.hit_block for p in match.promotions})


def capped_request(
    request: CacheRequest,
    match: PrefixMatch,
    layout: PageLayout,
    tier: TierSpec,
    profile: PerfProfile,
) -> CacheRequest:
    """`request`, its reusable prefix capped to the DRAM part of `match` when loading the rest
    from `tier` costs at least recomputing it; unchanged otherwise."""
    if not match.promotions:
        return request
    load_s = tier.read_s(match.num_promoted_pages * layout.page_bytes)
    lower_tokens = lower_positions(match) * layout.block_tokens
    value = valued_hit_tokens(profile, request.num_tokens, match.hit_tokens, lower_tokens, load_s)
    if value > match.hit_tokens - lower_tokens:
        return request
    first_lower = min(p.hit_block for p in match.promotions)
    if request.max_hit_blocks is not None:
        first_lower = min(first_lower, request.max_hit_blocks)
    return dataclasses.replace(request, max_hit_blocks=first_lower)


def allocate_weighed(
    pool: HybridPrefixCache, request: CacheRequest, profile: PerfProfile
) -> Allocation | OutOfPages:
    """The instance's side: allocate `request` in `pool`, first capping a hit whose part
    below DRAM is not worth its load (`capped_request`), so nothing is promoted for nothing."""
    tier = pool.config.lower_tier
    match = pool.match(request)
    if tier is None or not match.promotions:
        return pool.allocate(request, match)
    return pool.allocate(capped_request(request, match, pool.layout, tier, profile))


def promotion_s(pool: HybridPrefixCache, num_promoted_pages: int) -> float:
    """Seconds to read `num_promoted_pages` of `pool`'s pages back from its lower tier: what
    the prefill they precede waits for first."""
    tier = pool.config.lower_tier
    if tier is None or not num_promoted_pages:
        return 0.0
    return tier.read_s(num_promoted_pages * pool.layout.page_bytes)
