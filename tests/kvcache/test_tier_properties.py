"""Random workloads against a pool with a disk tier below it, and the index fed by its events.

The acceptance properties of issue 28, checked after every step:
- a hit is whole or absent: the pool's hit equals a brute-force oracle over both tiers (every
  attention block of the prefix and the boundary snapshot, each in DRAM or on disk), and once
  allocated every unit of it is in DRAM;
- no unit is counted in two tiers, by the pool or by the index (which also knows each tier);
- no tier holds more than its capacity;
- a promoted unit's bytes equal the bytes demoted: every unit's content is a function of its
  identity, written when it is computed and checked wherever it lies, in DRAM or on disk.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kvcache_fixtures import BLOCK_TOKENS, DENSE, HYBRID, TRIPLE, FillableDisk

from prfaas.kvcache import (
    Allocation,
    CacheConfig,
    CacheMisuseError,
    CacheRequest,
    ClusterId,
    GlobalKVCacheIndex,
    HybridPrefixCache,
    InstanceId,
    NumpyPageStorage,
    OutOfPages,
    RequestId,
    SnapshotPolicy,
)
from prfaas.kvcache.ids import BlockHash
from prfaas.kvcache.tiers import LowerTier, Medium, TierSpec

NAME = InstanceId("p0")
POLICIES = [SnapshotPolicy.every_block(), SnapshotPolicy.request_end(), SnapshotPolicy.junction()]
BLOCK_IDS = st.lists(st.integers(0, 3), min_size=1, max_size=6)


def content(group: int, block_hash: BlockHash, num_bytes: int) -> bytes:
    """A unit's bytes as a function of its identity, so any copy can be checked anywhere."""
    seed = hashlib.sha256(f"{group}:{block_hash}".encode()).digest()
    return (seed * (num_bytes // len(seed) + 1))[:num_bytes]


def lower_of(cache: HybridPrefixCache) -> LowerTier:
    lower = cache.pool.lower
    assert lower is not None
    return lower


def oracle_hit(cache: HybridPrefixCache, request: CacheRequest) -> int:
    """The hybrid hit rule by brute force over both tiers' contents."""
    pool, layout = cache.pool, cache.layout
    below = {key for key, _ in lower_of(cache).units()}

    def held(group: int, block_hash: BlockHash) -> bool:
        return block_hash in pool.cached_blocks(group) or (group, block_hash) in below

    hashes = request.block_hashes
    cap = len(hashes) if request.max_hit_blocks is None else request.max_hit_blocks
    best = 0
    for k in range(1, min(cap, len(hashes)) + 1):
        attention = all(held(g.index, h) for g in layout.attention_groups for h in hashes[:k])
        if attention and all(held(g.index, hashes[k - 1]) for g in layout.state_groups):
            best = k
    return best


class TieredPoolMachine(RuleBasedStateMachine):
    @initialize(
        spec=st.sampled_from([DENSE, HYBRID, TRIPLE]),
        policy=st.sampled_from(POLICIES),
        num_pages=st.integers(8, 24),
        disk_pages=st.integers(0, 24),
    )
    def build(self, spec: object, policy: SnapshotPolicy, num_pages: int, disk_pages: int) -> None:
        config = CacheConfig.for_model(
            spec,  # type: ignore[arg-type]
            block_tokens=BLOCK_TOKENS,
            num_pages=num_pages,
            snapshot_policy=policy,
            lower_tier=TierSpec(Medium.DISK, disk_pages * 512, 1e9, 1e9),
        )
        self.disk = FillableDisk()
        self.storage = NumpyPageStorage(num_pages, config.layout.page_bytes)
        self.cache = HybridPrefixCache(config, NAME, self.storage, self.disk)
        self.index = GlobalKVCacheIndex(config.identity)
        self.index.register_instance(NAME, ClusterId("prfaas"), config.identity)
        self.held: dict[RequestId, CacheRequest] = {}
        self.next_request = 0

    def request(self, ids: list[int], extra: int, cap: int | None) -> CacheRequest:
        self.next_request += 1
        hashes = self.cache.config.hash_scheme.hash_external(ids)
        tokens = max(1, len(ids) * BLOCK_TOKENS + extra)
        return CacheRequest(RequestId(f"r{self.next_request}"), hashes, tokens, cap)

    def compute(self, request: CacheRequest, allocation: Allocation) -> None:
        """What the engine does: fill every hashed unit it computes with that unit's bytes."""
        hashes, layout = request.block_hashes, self.cache.layout
        for group in allocation.attention:
            unit_bytes = layout.groups[group.group_index].unit_bytes
            first = allocation.match.attention_blocks
            for position in range(first, len(hashes)):
                data = content(group.group_index, hashes[position], unit_bytes)
                self.cache.write_block(group.block_ids[position], data)
        for state in allocation.state:
            unit_bytes = layout.groups[state.group_index].unit_bytes
            for boundary, block_id in state.snapshots:
                data = content(state.group_index, hashes[boundary - 1], unit_bytes)
                self.cache.write_block(block_id, data)

    def check_whole(self, request: CacheRequest, allocation: Allocation) -> None:
        """Every unit of the hit is in DRAM, holding its own bytes."""
        hit, hashes = allocation.match.hit_blocks, request.block_hashes
        for group in allocation.attention:
            for position in range(hit):
                info = self.cache.block_info(group.block_ids[position])
                assert info.block_hash == hashes[position]
        for state in allocation.state:
            if hit:
                assert state.restore_from is not None
                assert self.cache.block_info(state.restore_from).block_hash == hashes[hit - 1]

    # --- rules ---------------------------------------------------------------------------

    @rule(ids=BLOCK_IDS, extra=st.integers(-3, 6), cap=st.none() | st.integers(0, 6))
    def allocate(self, ids: list[int], extra: int, cap: int | None) -> None:
        request = self.request(ids, extra, cap)
        match = self.cache.match(request)
        assert match.hit_blocks == oracle_hit(self.cache, request)
        index_match = self.index.match(request.block_hashes, request.max_hit_blocks)
        assert index_match.per_instance[NAME] == match.hit_blocks
        assert index_match.lower_blocks.get(NAME, 0) == len({p.hit_block for p in match.promotions})
        allocation = self.cache.allocate(request, match)
        self.index.apply(self.cache.take_events())
        if isinstance(allocation, OutOfPages):
            return
        assert allocation.num_promoted_pages == match.num_promoted_pages
        self.check_whole(request, allocation)
        self.compute(request, allocation)
        self.held[request.request_id] = request

    @rule(ids=BLOCK_IDS, extra=st.integers(-3, 6), deferred=st.booleans())
    def failed_load(self, ids: list[int], extra: int, deferred: bool) -> None:
        """A hit's load from disk fails, partway (deferred: the engine's reader wrote some
        of the pages, then gave up) or in `allocate` (a unit torn on disk)."""
        request = self.request(ids, extra, None)
        match = self.cache.match(request)
        keys = [(p.group_index, p.block_hash) for p in match.promotions]
        if not keys or not self.cache.can_allocate(request, match):
            return
        if deferred:
            allocation = self.cache.allocate(request, match, defer_promotions=True)
            assert isinstance(allocation, Allocation)
            for move in allocation.pending_loads:  # half a load: garbage, then the error
                self.storage.write(move.pages, b"\xff" * 7)
                self.disk.delete(move.key)  # the reader deletes what it was loading
            self.cache.abandon(request.request_id, [m.key for m in allocation.pending_loads])
        else:
            self.disk.tear(keys[-1])
            with pytest.raises(CacheMisuseError, match="torn"):
                self.cache.allocate(request, match)
        self.index.apply(self.cache.take_events())
        pool = self.cache.pool
        assert not any(block_hash in pool.cached_blocks(g) for g, block_hash in keys)
        assert not any(pool.lower_holds(g, block_hash) for g, block_hash in keys)
        assert self.cache.stats().num_requests == len(self.held)
        assert self.cache.match(request).hit_blocks < match.hit_blocks

    @rule(full=st.booleans())
    def disk_fills_or_frees(self, full: bool) -> None:
        """While the disk is full every demotion's write fails: the unit is lost, never half
        kept (the invariants compare the tier's bookkeeping, the disk and the index)."""
        self.disk.full = full

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def commit_and_release(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.held)))
        del self.held[request_id]
        self.cache.commit(request_id)
        self.cache.release(request_id)
        self.index.apply(self.cache.take_events())

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def tiers_are_disjoint_bounded_and_faithful(self) -> None:
        if not hasattr(self, "cache"):
            return
        cache, lower = self.cache, lower_of(self.cache)
        assert lower.used_pages <= lower.capacity_pages
        assert cache.stats().num_used_pages <= cache.config.num_pages
        in_dram = {
            (g.index, h): b
            for g in cache.layout.groups
            for h, b in cache.pool.cached_blocks(g.index).items()
        }
        below = dict(lower.units())
        assert not in_dram.keys() & below.keys()
        assert len(self.disk) == len(below)
        for key, block_id in in_dram.items():
            group = cache.layout.groups[key[0]]
            assert self.index.medium_of(NAME, *key) is Medium.DRAM
            assert cache.read_block(block_id) == content(*key, group.unit_bytes)
        for key, num_pages in below.items():
            group = cache.layout.groups[key[0]]
            assert num_pages == group.pages_per_unit
            assert self.index.medium_of(NAME, *key) is Medium.DISK
            assert self.disk.get(key) == content(*key, group.unit_bytes)
        assert self.index.num_entries(NAME) == len(in_dram) + len(below)
        pool = cache.pool
        live = list(pool.blocks())
        assert pool.num_free_pages + sum(len(b.pages) for b in live) == pool.num_pages
        idle = [b for b in live if b.ref_count == 0]
        assert all(b.block_hash is not None for b in idle)  # an idle private block is freed
        assert sum(len(b.pages) for b in idle) == pool.num_evictable_pages
        counters = cache.tier_counters
        assert counters.demoted_bytes - counters.promoted_bytes >= lower.used_pages * 512


TieredPoolMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestTieredPool = TieredPoolMachine.TestCase
