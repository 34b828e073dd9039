"""Storage behind the bookkeeping: bytes written by one request are what a later hit reads."""

from __future__ import annotations

import numpy as np
import pytest
from kvcache_fixtures import HYBRID, ext_request, make_cache

from prfaas.kvcache import (
    Allocation,
    CacheConfigError,
    CacheMisuseError,
    HybridPrefixCache,
    InstanceId,
    NumpyPageStorage,
    PageId,
    RequestId,
    StorageUnavailableError,
)


def backed_cache(num_pages: int = 32) -> HybridPrefixCache:
    config = make_cache(HYBRID, num_pages=num_pages).config
    storage = NumpyPageStorage(num_pages, config.layout.page_bytes)
    return HybridPrefixCache(config, InstanceId("i0"), storage)


def fill(value: int, num_bytes: int) -> bytes:
    return bytes([value]) * num_bytes


def test_kv_and_state_written_by_one_request_are_restored_by_the_next() -> None:
    cache = backed_cache()
    block_bytes, state_bytes = (g.unit_bytes for g in cache.layout.groups)
    first = cache.allocate(ext_request(cache, "a", [1, 2]))
    assert isinstance(first, Allocation)
    for position, block_id in enumerate(first.attention[0].block_ids):
        cache.write_block(block_id, fill(10 + position, block_bytes))
    live = first.state[0].live_block_id
    for boundary, snapshot in first.state[0].snapshots:
        cache.write_block(live, fill(100 + boundary, state_bytes))  # the prompt advances
        cache.copy_block(live, snapshot)  # ... and leaves a snapshot at the boundary
    cache.commit(RequestId("a"))
    cache.release(RequestId("a"))

    second = cache.allocate(ext_request(cache, "b", [1, 2, 3]))
    assert isinstance(second, Allocation)
    hit_blocks = second.attention[0].block_ids[: second.match.hit_blocks]
    assert [cache.read_block(b) for b in hit_blocks] == [fill(10, 512), fill(11, 512)]
    state = second.state[0]
    assert state.restore_from is not None
    cache.copy_block(state.restore_from, state.live_block_id)
    assert cache.read_block(state.live_block_id) == fill(102, state_bytes)


def test_pages_can_be_viewed_in_place_as_typed_arrays() -> None:
    storage = NumpyPageStorage(num_pages=2, page_bytes=512)
    view = storage.page_view(PageId(1), np.float32, (2, 64))
    view[1, 0] = 1.5
    assert storage.read([PageId(1)], 512)[256:260] == np.float32(1.5).tobytes()
    assert storage.read([PageId(0)], 512) == bytes(512)
    with pytest.raises(CacheMisuseError):
        storage.page_view(PageId(0), np.float64, (65,))


def test_units_spanning_pages_are_gathered_and_scattered_in_page_order() -> None:
    storage = NumpyPageStorage(num_pages=3, page_bytes=4)
    storage.write([PageId(2), PageId(0)], b"abcdef")
    assert storage.read([PageId(2), PageId(0)], 6) == b"abcdef"
    assert storage.read([PageId(0)], 4) == b"ef\0\0"
    storage.copy([PageId(2)], [PageId(1)])
    assert storage.read([PageId(1)], 4) == b"abcd"
    with pytest.raises(CacheMisuseError):
        storage.write([PageId(0)], b"too long")
    with pytest.raises(CacheMisuseError):
        storage.read([PageId(0)], 5)
    with pytest.raises(CacheMisuseError):
        storage.copy([PageId(0)], [])


def test_storage_must_fit_the_pool_and_bookkeeping_only_pools_hold_no_bytes() -> None:
    config = make_cache(HYBRID, num_pages=8).config
    with pytest.raises(CacheConfigError):
        HybridPrefixCache(config, InstanceId("i0"), NumpyPageStorage(8, 256))
    with pytest.raises(CacheConfigError):
        NumpyPageStorage(0, 512)
    cache = make_cache(HYBRID)
    allocation = cache.allocate(ext_request(cache, "a", [1]))
    assert isinstance(allocation, Allocation)
    with pytest.raises(StorageUnavailableError):
        cache.read_block(allocation.attention[0].block_ids[0])
