"""Random operation sequences against two pools and the global index fed by their events.

After every step, for every pool: no page leaks (free pages and block pages partition the pool),
refcounts equal the holders the test counted (never negative), every unreferenced block is a
cached one waiting in the LRU, and the LRU is ordered by when blocks lost their last holder.
Every eviction takes the LRU head (skipping only blocks the same call re-used). Every match
equals a brute-force oracle of the hybrid hit rule (so never a hit without every state group)
and equals the global index's answer for that instance.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kvcache_fixtures import DENSE, HYBRID, TRIPLE, make_cache

from prfaas.kvcache import (
    Allocation,
    BlockId,
    BlockRemoved,
    CacheRequest,
    ClusterId,
    GlobalKVCacheIndex,
    HybridPrefixCache,
    InstanceId,
    OutOfPages,
    RequestId,
    SnapshotPolicy,
    TransferId,
)

INSTANCES = ("p0", "d0")
POLICIES = [
    SnapshotPolicy.every_block(),
    SnapshotPolicy.every_k_blocks(2),
    SnapshotPolicy.request_end(),
    SnapshotPolicy.junction(),
]
BLOCK_IDS = st.lists(st.integers(0, 2), min_size=1, max_size=5)


def oracle_hit(cache: HybridPrefixCache, request: CacheRequest) -> int:
    """The hybrid hit rule by brute force over the pool's cached sets."""
    hashes, pool, layout = request.block_hashes, cache.pool, cache.layout
    cap = len(hashes) if request.max_hit_blocks is None else request.max_hit_blocks
    best = 0
    for k in range(1, min(cap, len(hashes)) + 1):
        attention = all(
            h in pool.cached_blocks(g.index) for g in layout.attention_groups for h in hashes[:k]
        )
        state = all(hashes[k - 1] in pool.cached_blocks(g.index) for g in layout.state_groups)
        if attention and state:
            best = k
    return best


def held_by(allocation: Allocation) -> list[BlockId]:
    blocks = [b for group in allocation.attention for b in group.block_ids]
    for state in allocation.state:
        blocks.append(state.live_block_id)
        blocks += [b for _, b in state.snapshots]
        if state.restore_from is not None:
            blocks.append(state.restore_from)
    return blocks


class PoolMachine(RuleBasedStateMachine):
    @initialize(
        spec=st.sampled_from([DENSE, HYBRID, TRIPLE]),
        policy=st.sampled_from(POLICIES),
        num_pages=st.integers(10, 40),
    )
    def build(self, spec: object, policy: SnapshotPolicy, num_pages: int) -> None:
        self.caches = {
            name: make_cache(spec, num_pages=num_pages, policy=policy, instance=name)  # type: ignore[arg-type]
            for name in INSTANCES
        }
        self.index = GlobalKVCacheIndex(self.caches["p0"].config.identity)
        for name, cache in self.caches.items():
            self.index.register_instance(InstanceId(name), ClusterId(name), cache.config.identity)
        self.requests: dict[tuple[str, RequestId], tuple[CacheRequest, list[BlockId]]] = {}
        self.transfers: dict[tuple[str, TransferId], list[BlockId]] = {}
        self.holders = {name: Counter[BlockId]() for name in INSTANCES}
        self.unreferenced_since: dict[str, dict[BlockId, int]] = {n: {} for n in INSTANCES}
        self.step = 0
        self.next_request = 0

    # --- helpers -------------------------------------------------------------------------

    def request(self, name: str, ids: list[int], extra: int, cap: int | None) -> CacheRequest:
        cache = self.caches[name]
        self.next_request += 1
        tokens = max(1, len(ids) * 4 + extra)
        hashes = cache.config.hash_scheme.hash_external(ids)
        return CacheRequest(RequestId(f"r{self.next_request}"), hashes, tokens, cap)

    def check_match(self, name: str, request: CacheRequest) -> int:
        cache = self.caches[name]
        hit = cache.match(request).hit_blocks
        assert hit == oracle_hit(cache, request)
        index_hit = self.index.match_instance(
            InstanceId(name), request.block_hashes, request.max_hit_blocks
        )
        assert index_hit == hit
        return hit

    def drain(self, name: str) -> list[BlockRemoved]:
        events = self.caches[name].take_events()
        self.index.apply(events)
        return [e for e in events if isinstance(e, BlockRemoved)]

    # --- rules ---------------------------------------------------------------------------

    @rule(
        name=st.sampled_from(INSTANCES),
        ids=BLOCK_IDS,
        extra=st.integers(-3, 8),
        cap=st.none() | st.integers(0, 5),
    )
    def allocate(self, name: str, ids: list[int], extra: int, cap: int | None) -> None:
        cache = self.caches[name]
        request = self.request(name, ids, extra, cap)
        self.check_match(name, request)
        match = cache.match(request)
        before_stats, before_order = cache.stats(), cache.pool.eviction_order()
        cached_before = {
            (g.index, h): b
            for g in cache.layout.groups
            for h, b in cache.pool.cached_blocks(g.index).items()
        }
        result = cache.allocate(request, match)
        removed = self.drain(name)
        if isinstance(result, OutOfPages):
            assert not cache.plan(request, match).fits
            assert (cache.stats(), removed) == (before_stats, [])
            return
        touched = set(match.snapshot_ids) | {b for ids_ in match.attention_block_ids for b in ids_}
        candidates = [b for b in before_order if b not in touched]
        evicted = [cached_before[(e.group_index, e.block_hash)] for e in removed]
        assert evicted == candidates[: len(evicted)]  # LRU head first, never a held block
        blocks = held_by(result)
        self.holders[name].update(blocks)
        self.requests[(name, request.request_id)] = (request, blocks)

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), num_blocks=st.none() | st.integers(0, 5))
    def commit(self, data: st.DataObject, num_blocks: int | None) -> None:
        name, request_id = data.draw(st.sampled_from(sorted(self.requests)))
        self.caches[name].commit(request_id, num_blocks)
        assert self.drain(name) == []

    @precondition(lambda self: self.requests)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.requests)))
        _, blocks = self.requests.pop(key)
        self.caches[key[0]].release(key[1])
        self.holders[key[0]].subtract(blocks)
        assert self.drain(key[0]) == []

    @precondition(lambda self: self.requests)
    @rule(data=st.data(), first_block=st.integers(0, 3))
    def begin_transfer(self, data: st.DataObject, first_block: int) -> None:
        name, request_id = data.draw(st.sampled_from(sorted(self.requests)))
        request, _ = self.requests[(name, request_id)]
        num_blocks = -(-request.num_tokens // 4)
        if first_block > num_blocks:
            return
        manifest = self.caches[name].begin_transfer(request_id, first_block)
        pinned = [b for group in manifest.attention for b in group.block_ids]
        pinned += [b for _, b in manifest.live_states]
        self.holders[name].update(pinned)
        self.transfers[(name, manifest.transfer_id)] = pinned

    @precondition(lambda self: self.transfers)
    @rule(data=st.data())
    def complete_transfer(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.transfers)))
        self.caches[key[0]].complete_transfer(key[1])
        self.holders[key[0]].subtract(self.transfers.pop(key))
        assert self.drain(key[0]) == []

    @rule(name=st.sampled_from(INSTANCES), ids=BLOCK_IDS, cap=st.none() | st.integers(0, 5))
    def query(self, name: str, ids: list[int], cap: int | None) -> None:
        self.check_match(name, self.request(name, ids, 0, cap))

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def pools_are_consistent(self) -> None:
        if not hasattr(self, "caches"):
            return
        self.step += 1
        for name, cache in self.caches.items():
            pool = cache.pool
            blocks = list(pool.blocks())
            pages = [p for b in blocks for p in b.pages]
            assert len(pages) == len(set(pages))  # no page in two blocks
            assert set(pages).isdisjoint(pool.free_pages())  # nor both free and used
            assert len(pages) + pool.num_free_pages == pool.num_pages  # no leak
            unreferenced = set()
            for b in blocks:
                assert b.ref_count == self.holders[name][b.block_id] >= 0
                if b.ref_count == 0:
                    assert b.is_cached
                    unreferenced.add(b.block_id)
            order = pool.eviction_order()
            assert set(order) == unreferenced
            since = self.unreferenced_since[name]
            for gone in set(since) - unreferenced:
                del since[gone]
            for block_id in order:
                since.setdefault(block_id, self.step)
            steps = [since[b] for b in order]
            assert steps == sorted(steps)  # LRU order = order of losing the last holder


PoolMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
TestPoolMachine = PoolMachine.TestCase
