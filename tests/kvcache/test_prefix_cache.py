"""The facade and coordinator on tiny models: exact allocations, the hybrid hit rule, errors.

HYBRID has 4-token blocks, one attention group (1 page a block) and one linear group (2 pages
a snapshot); see kvcache_fixtures.py.
"""

from __future__ import annotations

import pytest
from kvcache_fixtures import DENSE, HYBRID, TRIPLE, ext_request, make_cache

from prfaas.kvcache import (
    Allocation,
    AttentionBlocks,
    BlockKind,
    BlockStored,
    CacheRequest,
    DuplicateRequestError,
    HybridPrefixCache,
    InvalidRequestError,
    OutOfPages,
    RequestId,
    SnapshotPolicy,
    StateBlocks,
    UnknownRequestError,
)


def serve(cache: HybridPrefixCache, request: CacheRequest) -> Allocation:
    allocation = cache.allocate(request)
    assert isinstance(allocation, Allocation)
    cache.commit(request.request_id)
    cache.release(request.request_id)
    return allocation


def test_a_miss_allocates_blocks_tail_live_state_and_snapshots_in_order() -> None:
    cache = make_cache(HYBRID)
    request = ext_request(cache, "a", [1, 2, 3], num_tokens=14)
    plan = cache.plan(request)
    assert (plan.num_new_blocks, plan.num_tail_blocks, plan.snapshot_boundaries) == (
        3,
        1,
        (1, 2, 3),
    )
    assert plan.num_pages == 4 * 1 + 4 * 2
    allocation = cache.allocate(request)
    assert isinstance(allocation, Allocation)
    assert allocation.attention == (AttentionBlocks(0, (0, 1, 2, 3), num_tail_blocks=1),)
    assert allocation.state == (StateBlocks(1, 4, None, ((1, 5), (2, 6), (3, 7))),)
    assert cache.block_info(3).kind is BlockKind.TRANSFER
    assert cache.pages_of(7) == (10, 11)
    assert cache.commit(RequestId("a")) == 6
    h = request.block_hashes
    assert cache.take_events() == [BlockStored(cache.instance_id, 0, x) for x in h] + [
        BlockStored(cache.instance_id, 1, x) for x in h
    ]
    cache.release(RequestId("a"))
    # Deepest first: the snapshot at boundary 3, then block 2, ... ; tail and live are freed.
    assert cache.pool.eviction_order() == (7, 2, 6, 1, 5, 0)
    assert cache.stats().num_free_pages == 64 - 9


def test_a_hit_references_cached_blocks_and_restores_the_snapshot_at_its_boundary() -> None:
    cache = make_cache(HYBRID)
    serve(cache, ext_request(cache, "a", [1, 2, 3], num_tokens=14))
    request = ext_request(cache, "b", [1, 2, 9])
    match = cache.match(request)
    assert (match.hit_blocks, match.hit_tokens, match.attention_blocks) == (2, 8, 2)
    allocation = cache.allocate(request, match)
    assert isinstance(allocation, Allocation)
    assert allocation.attention == (AttentionBlocks(0, (0, 1, 8), 0),)
    assert allocation.state == (StateBlocks(1, 9, 6, ((3, 10),)),)
    assert allocation.num_new_pages == 5
    assert [cache.block_info(b).ref_count for b in (0, 1, 6)] == [1, 1, 1]
    assert cache.pool.eviction_order() == (7, 2, 5)


def test_never_a_hit_without_the_state_at_exactly_that_boundary() -> None:
    cache = make_cache(HYBRID, policy=SnapshotPolicy.request_end())
    serve(cache, ext_request(cache, "a", [1, 2, 3]))
    match = cache.match(ext_request(cache, "b", [1, 2, 9]))
    assert (match.attention_blocks, match.hit_blocks) == (2, 0)  # KV there, state not


def test_cached_attention_past_the_state_hit_is_referenced_not_duplicated() -> None:
    cache = make_cache(HYBRID, policy=SnapshotPolicy.request_end())
    serve(cache, ext_request(cache, "a", [1, 2, 3]))  # blocks 0-2, live 3, snapshot 4
    allocation = cache.allocate(ext_request(cache, "b", [1, 2, 9]))
    assert isinstance(allocation, Allocation)
    assert allocation.match.hit_blocks == 0
    assert allocation.attention == (AttentionBlocks(0, (0, 1, 5), 0),)  # 0, 1 recomputed only
    assert allocation.state == (StateBlocks(1, 6, None, ((3, 7),)),)
    assert allocation.num_new_pages == 1 + 2 + 2
    assert cache.commit(RequestId("b")) == 2  # block 5 and the snapshot at boundary 3


def test_a_junction_snapshot_makes_the_shared_prefix_reusable_for_the_next_request() -> None:
    cache = make_cache(HYBRID, policy=SnapshotPolicy.junction())
    serve(cache, ext_request(cache, "a", [1, 2, 3]))
    b = serve(cache, ext_request(cache, "b", [1, 2, 9]))
    assert b.state[0].snapshots[0][0] == 2  # snapshot taken where b left a's prefix
    assert cache.match(ext_request(cache, "c", [1, 2, 7])).hit_blocks == 2


def test_the_hit_is_the_deepest_boundary_every_state_group_can_restore() -> None:
    cache = make_cache(TRIPLE, num_pages=128, policy=SnapshotPolicy.every_k_blocks(2))
    serve(cache, ext_request(cache, "a", [1, 2, 3, 4, 5]))
    match = cache.match(ext_request(cache, "b", [1, 2, 3, 4, 5]))
    assert (match.attention_blocks, match.hit_blocks, len(match.snapshot_ids)) == (5, 4, 2)
    capped = cache.match(ext_request(cache, "c", [1, 2, 3, 4, 5], max_hit_blocks=3))
    assert capped.hit_blocks == 2


def test_a_dense_model_matches_any_cached_prefix() -> None:
    cache = make_cache(DENSE)
    serve(cache, ext_request(cache, "a", [1, 2, 3]))
    assert cache.match(ext_request(cache, "b", [1, 2, 4, 5])).hit_blocks == 2


def test_a_partial_block_named_by_the_trace_is_reused_only_at_its_own_length() -> None:
    cache = make_cache(DENSE)
    serve(cache, ext_request(cache, "a", [1, 2], num_tokens=6))
    assert cache.match(ext_request(cache, "b", [1, 2], num_tokens=6)).hit_tokens == 6
    assert cache.match(ext_request(cache, "c", [1, 2, 3], num_tokens=10)).hit_tokens == 8


def test_running_out_of_pages_is_a_return_value_and_changes_nothing() -> None:
    cache = make_cache(HYBRID, num_pages=8)
    before = cache.stats()
    result = cache.allocate(ext_request(cache, "a", [1, 2, 3], num_tokens=14))
    assert result == OutOfPages(RequestId("a"), num_pages_needed=12, num_pages_available=8)
    assert not cache.can_allocate(ext_request(cache, "a", [1, 2, 3], num_tokens=14))
    assert cache.stats() == before
    assert cache.take_events() == []


def test_a_stale_match_is_recomputed_after_an_eviction() -> None:
    cache = make_cache(DENSE, num_pages=4)
    serve(cache, ext_request(cache, "a", [1, 2]))
    request = ext_request(cache, "b", [1, 2])
    stale = cache.match(request)
    assert stale.hit_blocks == 2
    serve(cache, ext_request(cache, "c", [7, 8, 9]))  # evicts block [1, 2]
    allocation = cache.allocate(request, stale)
    assert isinstance(allocation, Allocation)
    assert allocation.match.hit_blocks == 1


def test_chunked_commits_publish_blocks_and_snapshots_as_they_complete() -> None:
    cache = make_cache(HYBRID)
    request = ext_request(cache, "a", [1, 2, 3])
    cache.allocate(request)
    assert cache.commit(RequestId("a"), num_blocks=2) == 4
    assert cache.match(ext_request(cache, "b", [1, 2, 3])).hit_blocks == 2
    assert cache.commit(RequestId("a"), num_blocks=1) == 0
    assert cache.commit(RequestId("a")) == 2


def test_a_duplicate_block_stays_private_and_is_freed_on_release() -> None:
    cache = make_cache(DENSE)
    a, b = ext_request(cache, "a", [1, 2]), ext_request(cache, "b", [1, 2])
    cache.allocate(a)
    cache.allocate(b)  # both miss: a has not committed yet
    assert cache.commit(RequestId("a")) == 2
    assert cache.commit(RequestId("b")) == 0
    cache.release(RequestId("b"))
    cache.release(RequestId("a"))
    assert cache.stats().num_live_blocks == 2


def test_misuse_raises() -> None:
    cache = make_cache(HYBRID)
    request = ext_request(cache, "a", [1, 2])
    cache.allocate(request)
    with pytest.raises(DuplicateRequestError):
        cache.allocate(request)
    with pytest.raises(InvalidRequestError):
        cache.commit(RequestId("a"), num_blocks=-1)
    cache.release(RequestId("a"))
    for call in (cache.release, cache.commit, cache.begin_transfer):
        with pytest.raises(UnknownRequestError):
            call(RequestId("a"))
    with pytest.raises(InvalidRequestError):
        cache.match(ext_request(cache, "x", [1, 2, 3], num_tokens=8))
    with pytest.raises(InvalidRequestError):
        CacheRequest(RequestId("x"), (), 0)
    with pytest.raises(InvalidRequestError):
        CacheRequest(RequestId("x"), (), 1, max_hit_blocks=-1)
