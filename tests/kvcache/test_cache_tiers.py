"""A disk tier below the pool: demotion on eviction, promotion on a hit, events and the index."""

from __future__ import annotations

import dataclasses

import pytest
from kvcache_fixtures import BLOCK_TOKENS, DENSE, HYBRID, FillableDisk, ext_request

from prfaas.kvcache import (
    Allocation,
    BlockRemoved,
    BlockStored,
    CacheConfig,
    CacheConfigError,
    CacheMisuseError,
    ClusterId,
    EventStreamError,
    GlobalKVCacheIndex,
    HybridPrefixCache,
    InstanceId,
    NumpyPageStorage,
    RequestId,
    SnapshotPolicy,
)
from prfaas.kvcache.tiers import Medium, MemoryTierStorage, TierSpec
from prfaas.specs.model import ModelSpec

DISK = Medium.DISK


def tiered(
    spec: ModelSpec = DENSE, num_pages: int = 4, disk_pages: int = 8, with_bytes: bool = False
) -> HybridPrefixCache:
    config = CacheConfig.for_model(
        spec,
        block_tokens=BLOCK_TOKENS,
        num_pages=num_pages,
        snapshot_policy=SnapshotPolicy.request_end(),
        lower_tier=TierSpec(DISK, disk_pages * 512, 2e9, 1e9),
    )
    if not with_bytes:
        return HybridPrefixCache(config, InstanceId("i0"))
    storage = NumpyPageStorage(num_pages, 512)
    return HybridPrefixCache(config, InstanceId("i0"), storage, MemoryTierStorage())


def serve(cache: HybridPrefixCache, name: str, ids: list[int]) -> Allocation:
    allocation = cache.allocate(ext_request(cache, name, ids))
    assert isinstance(allocation, Allocation)
    cache.commit(RequestId(name))
    cache.release(RequestId(name))
    return allocation


def test_eviction_demotes_and_a_hit_promotes_with_events_naming_the_medium() -> None:
    cache = tiered()
    a = cache.config.hash_scheme.hash_external([1, 2, 3, 4])
    serve(cache, "a", [1, 2, 3, 4])
    cache.take_events()
    serve(cache, "b", [9, 8])  # evicts the deepest two blocks of "a": 4 then 3
    events = cache.take_events()
    assert events[:4] == [
        BlockRemoved(InstanceId("i0"), 0, a[3]),
        BlockStored(InstanceId("i0"), 0, a[3], DISK),
        BlockRemoved(InstanceId("i0"), 0, a[2]),
        BlockStored(InstanceId("i0"), 0, a[2], DISK),
    ]
    match = cache.match(ext_request(cache, "q", [1, 2, 3, 4]))
    assert (match.hit_blocks, [p.position for p in match.promotions]) == (4, [2, 3])
    allocation = serve(cache, "c", [1, 2, 3, 4])
    assert allocation.num_promoted_pages == 2
    stored = [e for e in cache.take_events() if isinstance(e, BlockStored)]
    assert {(e.block_hash, e.medium) for e in stored} >= {(a[2], Medium.DRAM), (a[3], Medium.DRAM)}
    assert cache.tier_counters.promoted_bytes == 2 * 512


@pytest.mark.parametrize(("disk_pages", "hit_blocks"), [(3, 2), (2, 0)])
def test_a_snapshot_moves_with_its_blocks_and_a_hit_is_whole_or_absent(
    disk_pages: int, hit_blocks: int
) -> None:
    cache = tiered(HYBRID, num_pages=8, disk_pages=disk_pages)  # block 1 page, GDN state 2
    a = cache.config.hash_scheme.hash_external([1, 2])
    serve(cache, "a", [1, 2])  # blocks 1, 2 and the snapshot at 2 stay cached: 4 pages
    serve(cache, "b", [7, 8, 9])  # 3 blocks + live + snapshot = 7 pages: evicts 3 of "a"'s
    below = [key for key, _ in cache.pool.lower.units()]  # type: ignore[union-attr]
    # The snapshot leaves first, then the block ending at its boundary; a 2-page tier keeps
    # only that block, so the attention KV of [1, 2] is restorable but its state is not.
    assert below == ([(1, a[1]), (0, a[1])] if disk_pages == 3 else [(0, a[1])])
    match = cache.match(ext_request(cache, "q", [1, 2]))
    assert match.hit_blocks == hit_blocks
    assert len(match.promotions) == (2 if hit_blocks else 0)


def test_bytes_promoted_are_the_bytes_demoted() -> None:
    cache = tiered(with_bytes=True)
    allocation = cache.allocate(ext_request(cache, "a", [1, 2, 3, 4]))
    assert isinstance(allocation, Allocation)
    blocks = allocation.attention[0].block_ids
    for k, block_id in enumerate(blocks):
        cache.write_block(block_id, bytes([k + 1]) * 512)
    cache.commit(RequestId("a"))
    cache.release(RequestId("a"))
    serve(cache, "b", [9, 8, 7, 6])  # every block of "a" goes to disk
    again = serve(cache, "c", [1, 2, 3, 4])
    assert again.num_promoted_pages == 4
    read = [cache.read_block(b) for b in again.attention[0].block_ids]
    assert read == [bytes([k + 1]) * 512 for k in range(4)]


def demote_all(cache: HybridPrefixCache, storage: MemoryTierStorage) -> None:
    """Serve "a" with distinct bytes per block, then push every block of it onto disk."""
    allocation = cache.allocate(ext_request(cache, "a", [1, 2, 3, 4]))
    assert isinstance(allocation, Allocation)
    for k, block_id in enumerate(allocation.attention[0].block_ids):
        cache.write_block(block_id, bytes([k + 1]) * 512)
    cache.commit(RequestId("a"))
    cache.release(RequestId("a"))
    serve(cache, "b", [9, 8, 7, 6])
    assert len(storage) == 4


def test_deferred_promotions_do_the_bookkeeping_and_hand_the_bytes_to_the_caller() -> None:
    caches = []
    for _ in range(2):
        storage, pages = MemoryTierStorage(), NumpyPageStorage(4, 512)
        cache = HybridPrefixCache(tiered().config, InstanceId("i0"), pages, storage)
        demote_all(cache, storage)
        cache.take_events()
        caches.append((cache, storage, pages))
    (whole, _, _), (deferred, disk, pages) = caches
    now = whole.allocate(ext_request(whole, "c", [1, 2, 3, 4]))
    later = deferred.allocate(ext_request(deferred, "c", [1, 2, 3, 4]), defer_promotions=True)
    assert isinstance(now, Allocation) and isinstance(later, Allocation)
    # The same pages, events, stats and counters: only the bytes wait.
    assert now.pending_loads == ()
    assert dataclasses.replace(later, pending_loads=()) == now
    assert deferred.take_events() == whole.take_events()
    assert deferred.stats() == whole.stats()
    assert deferred.tier_counters == whole.tier_counters
    hashes = deferred.config.hash_scheme.hash_external([1, 2, 3, 4])
    assert sorted(m.key for m in later.pending_loads) == sorted((0, h) for h in hashes)
    for move in later.pending_loads:  # still in the tier's storage, for the caller to read
        pages.write(move.pages, disk.get(move.key))
    read = [deferred.read_block(b) for b in later.attention[0].block_ids]
    assert read == [bytes([k + 1]) * 512 for k in range(4)]


def test_a_torn_unit_is_refused_when_loaded_whole() -> None:
    storage = MemoryTierStorage()
    cache = HybridPrefixCache(tiered().config, InstanceId("i0"), NumpyPageStorage(4, 512), storage)
    demote_all(cache, storage)
    key = (0, cache.config.hash_scheme.hash_external([1])[0])
    storage.put(key, storage.get(key)[:100])  # a unit cut short on its medium
    with pytest.raises(CacheMisuseError, match="torn"):
        cache.allocate(ext_request(cache, "c", [1, 2, 3, 4]))


def test_the_index_knows_the_tier_and_counts_hit_blocks_below_dram() -> None:
    cache = tiered()
    index = GlobalKVCacheIndex(cache.config.identity)
    index.register_instance(InstanceId("i0"), ClusterId("c"), cache.config.identity)
    serve(cache, "a", [1, 2, 3, 4])
    serve(cache, "b", [9, 8])
    index.apply(cache.take_events())
    query = ext_request(cache, "q", [1, 2, 3, 4]).block_hashes
    result = index.match(query)
    assert (result.per_instance[InstanceId("i0")], result.lower_blocks) == (4, {"i0": 2})
    assert index.medium_of(InstanceId("i0"), 0, query[3]) is DISK
    with pytest.raises(EventStreamError):  # a removal must name the tier the unit is in
        index.apply([BlockRemoved(InstanceId("i0"), 0, query[3], Medium.DRAM)])


def test_tier_configuration_is_checked() -> None:
    with pytest.raises(CacheConfigError):
        TierSpec(Medium.DRAM, 1, 1.0, 1.0)
    with pytest.raises(CacheConfigError):
        TierSpec(DISK, 1024, 0.0, 1.0)
    config = tiered().config
    with pytest.raises(CacheConfigError):  # bytes on disk need bytes in DRAM to come from
        HybridPrefixCache(config, InstanceId("i0"), None, MemoryTierStorage())


def test_a_unit_the_tier_cannot_store_is_forgotten_and_the_eviction_goes_on() -> None:
    cache = HybridPrefixCache(
        tiered().config, InstanceId("i0"), NumpyPageStorage(4, 512), FillableDisk(full=True)
    )
    index = GlobalKVCacheIndex(cache.config.identity)
    index.register_instance(InstanceId("i0"), ClusterId("c"), cache.config.identity)
    a = cache.config.hash_scheme.hash_external([1, 2, 3, 4])
    serve(cache, "a", [1, 2, 3, 4])
    serve(cache, "b", [9, 8])  # evicts a's deepest two blocks; the disk takes neither
    events = cache.take_events()
    assert [e for e in events if e.medium is DISK] == [
        BlockStored(InstanceId("i0"), 0, a[3], DISK),
        BlockStored(InstanceId("i0"), 0, a[2], DISK),
        BlockRemoved(InstanceId("i0"), 0, a[3], DISK),
        BlockRemoved(InstanceId("i0"), 0, a[2], DISK),
    ]
    index.apply(events)
    assert index.match(list(a)).lower_blocks == {}
    assert cache.pool.lower is not None and cache.pool.lower.num_units == 0
    assert cache.tier_counters.failed_demotions == 2
    match = cache.match(ext_request(cache, "q", [1, 2, 3, 4]))
    assert (match.hit_blocks, match.promotions) == (2, ())
    assert isinstance(cache.allocate(ext_request(cache, "c", [1, 2, 3, 4])), Allocation)
