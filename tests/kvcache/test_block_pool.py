"""The block pool alone: exact page and block ids, LRU eviction order, misuse errors."""

from __future__ import annotations

import pytest

from prfaas.kvcache import (
    BlockHash,
    BlockKind,
    BlockPool,
    BlockRemoved,
    BlockStateError,
    BlockStored,
    CacheConfigError,
    DoubleFreeError,
    InstanceId,
    NewBlock,
    RefcountUnderflowError,
    UnknownBlockError,
)

I0 = InstanceId("i0")
PREFIX, TRANSFER = BlockKind.PREFIX, BlockKind.TRANSFER


def one(pool: BlockPool, group: int = 0, pages: int = 1, kind: BlockKind = PREFIX) -> int:
    ids = pool.acquire([], [NewBlock(group, pages, kind)])
    assert ids is not None
    return ids[0]


def test_pages_come_fresh_in_order_then_recycled_oldest_first() -> None:
    pool = BlockPool(num_pages=6, num_groups=2, instance_id=I0)
    ids = pool.acquire([], [NewBlock(0, 1, PREFIX), NewBlock(1, 2, PREFIX)])
    assert ids == [0, 1]
    assert pool.info(0).pages == (0,) and pool.info(1).pages == (1, 2)
    big = one(pool, pages=3, kind=TRANSFER)
    assert pool.info(big).pages == (3, 4, 5)
    assert pool.num_free_pages == 0
    pool.release(1)  # private: freed at once, pages 1 and 2 join the back of the queue
    pool.release(big)
    assert pool.num_free_pages == 5
    assert pool.info(one(pool, pages=3)).pages == (1, 2, 3)
    assert pool.free_pages() == {4, 5}


def test_a_cached_block_outlives_its_last_holder_until_evicted() -> None:
    pool = BlockPool(num_pages=2, num_groups=1, instance_id=I0)
    block = one(pool)
    assert pool.cache(block, BlockHash(7)) is True
    assert pool.take_events() == [BlockStored(I0, 0, BlockHash(7))]
    pool.release(block)
    assert pool.info(block).ref_count == 0
    assert pool.num_evictable_pages == 1
    assert pool.cached_blocks(0) == {7: block}
    assert pool.available_pages() == 2
    assert pool.available_pages([block]) == 1  # touching it would pin it


def test_eviction_takes_free_pages_first_then_the_lru_head_in_release_order() -> None:
    pool = BlockPool(num_pages=4, num_groups=1, instance_id=I0)
    blocks = [one(pool) for _ in range(3)]
    for block, h in zip(blocks, (10, 11, 12), strict=True):
        pool.cache(block, BlockHash(h))
    for block in (blocks[1], blocks[0], blocks[2]):
        pool.release(block)
    pool.take_events()
    assert pool.eviction_order() == (1, 0, 2)
    new = pool.acquire([], [NewBlock(0, 3, TRANSFER)])
    assert new == [3]
    assert pool.info(3).pages == (3, 1, 0)  # the free page, then those of blocks 1 and 0
    assert pool.take_events() == [
        BlockRemoved(I0, 0, BlockHash(11)),
        BlockRemoved(I0, 0, BlockHash(10)),
    ]
    assert pool.eviction_order() == (2,)
    assert pool.epoch == 2


def test_touch_takes_a_block_out_of_the_lru_and_protects_it() -> None:
    pool = BlockPool(num_pages=2, num_groups=1, instance_id=I0)
    a, b = one(pool), one(pool)
    pool.cache(a, BlockHash(1))
    pool.cache(b, BlockHash(2))
    pool.release(a)
    pool.release(b)
    new = pool.acquire([a], [NewBlock(0, 1, PREFIX)])
    assert new == [2]
    assert pool.info(a).ref_count == 1
    assert pool.cached_blocks(0) == {1: a}  # b was evicted although a was older


def test_an_allocation_that_cannot_fit_changes_nothing() -> None:
    pool = BlockPool(num_pages=3, num_groups=1, instance_id=I0)
    a = one(pool)
    pool.cache(a, BlockHash(1))
    pool.release(a)
    pool.take_events()
    assert pool.acquire([a], [NewBlock(0, 3, PREFIX)]) is None
    assert pool.info(a).ref_count == 0
    assert pool.eviction_order() == (a,)
    assert pool.take_events() == []
    assert pool.acquire([], [NewBlock(0, 3, PREFIX)]) == [1]  # evicting a makes room


def test_a_second_block_under_a_cached_hash_stays_private() -> None:
    pool = BlockPool(num_pages=4, num_groups=2, instance_id=I0)
    a, b, c = one(pool), one(pool), one(pool, group=1)
    assert pool.cache(a, BlockHash(5)) is True
    assert pool.cache(b, BlockHash(5)) is False
    assert pool.cache(c, BlockHash(5)) is True  # another group: another cache
    pool.release(b)
    with pytest.raises(DoubleFreeError):
        pool.info(b)


def test_uncache_drops_a_unit_as_eviction_does_and_frees_it_with_its_last_holder() -> None:
    pool = BlockPool(num_pages=3, num_groups=1, instance_id=I0)
    held, idle = one(pool), one(pool, pages=2)
    pool.cache(held, BlockHash(1))
    pool.cache(idle, BlockHash(2))
    pool.release(idle)
    pool.take_events()
    epoch = pool.epoch
    pool.uncache((0, BlockHash(2)))  # unreferenced: its pages are free at once
    pool.uncache((0, BlockHash(1)))  # still held: private now, freed on its last release
    assert pool.take_events() == [
        BlockRemoved(I0, 0, BlockHash(2)),
        BlockRemoved(I0, 0, BlockHash(1)),
    ]
    assert pool.epoch == epoch + 2
    assert pool.cached_blocks(0) == {} and pool.eviction_order() == ()
    assert pool.num_free_pages == 2 and pool.num_evictable_pages == 0
    pool.release(held)
    assert pool.num_free_pages == 3 and pool.num_live_blocks == 0
    with pytest.raises(UnknownBlockError):
        pool.uncache((0, BlockHash(1)))


def test_misuse_raises() -> None:
    pool = BlockPool(num_pages=4, num_groups=1, instance_id=I0)
    block = one(pool)
    tail = one(pool, kind=TRANSFER)
    with pytest.raises(UnknownBlockError):
        pool.release(99)  # type: ignore[arg-type]
    with pytest.raises(BlockStateError):
        pool.cache(tail, BlockHash(1))
    pool.cache(block, BlockHash(1))
    with pytest.raises(BlockStateError):
        pool.cache(block, BlockHash(2))
    pool.release(block)
    with pytest.raises(RefcountUnderflowError):
        pool.release(block)
    with pytest.raises(BlockStateError):
        pool.cache(block, BlockHash(3))
    pool.release(tail)
    with pytest.raises(DoubleFreeError):
        pool.release(tail)
    with pytest.raises(DoubleFreeError):
        pool.touch(tail)
    with pytest.raises(CacheConfigError):
        BlockPool(num_pages=0, num_groups=1, instance_id=I0)
