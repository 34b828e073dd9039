"""Transfer blocks: the uncached tail and live state stay pinned until the receiver acks."""

from __future__ import annotations

import pytest
from kvcache_fixtures import HYBRID, ext_request, make_cache

from prfaas.kvcache import (
    Allocation,
    AttentionBlocks,
    CacheRequest,
    DoubleFreeError,
    InvalidRequestError,
    RequestId,
    UnknownTransferError,
)


def test_a_transfer_pins_what_the_receiver_lacks_until_it_acks() -> None:
    cache = make_cache(HYBRID)
    cache.allocate(ext_request(cache, "a", [1, 2, 3], num_tokens=14))
    cache.commit(RequestId("a"))
    manifest = cache.begin_transfer(RequestId("a"), first_block=1)
    assert manifest.attention == (AttentionBlocks(0, (1, 2, 3), num_tail_blocks=1),)
    assert manifest.live_states == ((1, 4),)
    assert manifest.num_pages == 3 + 2
    cache.release(RequestId("a"))
    assert cache.stats().num_transfers == 1
    assert [cache.block_info(b).ref_count for b in (1, 2, 3, 4)] == [1, 1, 1, 1]
    assert cache.block_info(0).ref_count == 0  # the receiver has block 0: not pinned
    cache.complete_transfer(manifest.transfer_id)
    for private in (3, 4):  # tail and live state: freed once sent
        with pytest.raises(DoubleFreeError):
            cache.block_info(private)
    assert cache.block_info(1).ref_count == 0  # full blocks stay as prefix cache
    assert cache.stats().num_transfers == 0
    with pytest.raises(UnknownTransferError):
        cache.complete_transfer(manifest.transfer_id)


def test_an_ack_before_the_request_ends_leaves_the_request_its_blocks() -> None:
    cache = make_cache(HYBRID)
    cache.allocate(ext_request(cache, "a", [1, 2], num_tokens=9))
    first = cache.begin_transfer(RequestId("a"))
    second = cache.begin_transfer(RequestId("a"), first_block=3)
    assert (first.transfer_id, second.transfer_id) == (0, 1)
    assert second.attention == (AttentionBlocks(0, (), num_tail_blocks=0),)
    cache.complete_transfer(first.transfer_id)
    cache.complete_transfer(second.transfer_id)
    assert cache.block_info(2).ref_count == 1  # the tail, still the request's
    cache.release(RequestId("a"))
    assert cache.stats().num_live_blocks == 0  # never committed: all private


def test_a_transfer_outside_the_prompt_is_refused() -> None:
    cache = make_cache(HYBRID)
    cache.allocate(ext_request(cache, "a", [1, 2]))
    with pytest.raises(InvalidRequestError):
        cache.begin_transfer(RequestId("a"), first_block=3)


def test_an_imported_request_caches_its_attention_blocks_but_publishes_no_snapshot() -> None:
    """A decode instance imports only the final state: it must not publish snapshots at
    boundaries it never saw, or a later request would hit garbage (attention KV restored without
    its state gives wrong output)."""
    cache = make_cache(HYBRID)
    base = ext_request(cache, "imported", [1, 2, 3], num_tokens=14)
    request = CacheRequest(base.request_id, base.block_hashes, 14, takes_snapshots=False)
    plan = cache.plan(request)
    assert plan.snapshot_boundaries == ()
    assert plan.num_pages == 4 + 2  # 3 full + 1 tail attention block, the live state only
    allocation = cache.allocate(request)
    assert isinstance(allocation, Allocation)
    assert allocation.state[0].snapshots == ()
    assert cache.commit(request.request_id) == 3
    cache.release(request.request_id)
    again = cache.match(ext_request(cache, "next", [1, 2, 3], num_tokens=14))
    assert (again.attention_blocks, again.hit_blocks) == (3, 0)
