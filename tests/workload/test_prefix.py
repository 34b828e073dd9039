"""The prefix-cache replay: exact hits and evictions, and properties over random traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.workload import (
    LruBlockCache,
    TraceRequest,
    Workload,
    read_mooncake_trace,
    replay_prefix_cache,
)


def request(input_tokens: int, *hash_ids: int) -> TraceRequest:
    return TraceRequest(0.0, input_tokens, 1, hash_ids)


def test_the_worked_example_of_the_module_docstring() -> None:
    replay = replay_prefix_cache([request(600, 10), request(1300, 10, 11, 12)], None)
    assert replay.uncached_tokens == (600, 788)
    assert replay.cached_tokens == (0, 512)


def test_partial_blocks_are_never_cached_and_one_token_is_always_computed() -> None:
    # 1,100 tokens: blocks 1 and 2 full, block 3 partial (76 tokens).
    replay = replay_prefix_cache([request(1100, 1, 2, 3), request(1100, 1, 2, 3)], None)
    assert replay.uncached_tokens == (1100, 76)
    replay = replay_prefix_cache([request(1024, 1, 2), request(1024, 1, 2)], None)
    assert replay.uncached_tokens == (1024, 1)


def test_a_hit_stops_at_the_first_missing_block() -> None:
    cache = LruBlockCache(None)
    cache.touch([1, 3])
    assert cache.matched_prefix_blocks([1, 2, 3]) == 1
    assert cache.matched_prefix_blocks([2, 1]) == 0


def test_lru_evicts_the_least_recently_touched_blocks() -> None:
    cache = LruBlockCache(3)
    cache.touch([1, 2, 3])
    cache.touch([1])  # 1 becomes the most recent; 2 is now the oldest
    cache.touch([4])
    assert [b in cache for b in (1, 2, 3, 4)] == [True, False, True, True]
    assert len(cache) == 3


def test_zero_capacity_caches_nothing() -> None:
    replay = replay_prefix_cache([request(1024, 1, 2)] * 3, 0)
    assert replay.uncached_tokens == (1024, 1024, 1024)
    assert replay.hit_fraction == 0.0
    with pytest.raises(ValueError):
        LruBlockCache(-1)


traces = st.lists(
    st.lists(st.integers(0, 12), min_size=1, max_size=8).map(
        lambda ids: request(len(ids) * 512 - 100, *ids)
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(trace=traces, capacity=st.integers(0, 20))
def test_replay_bounds_and_monotone_in_capacity(trace: list[TraceRequest], capacity: int) -> None:
    small = replay_prefix_cache(trace, capacity)
    larger = replay_prefix_cache(trace, capacity + 1)
    unbounded = replay_prefix_cache(trace, None)
    for r, uncached, cached in zip(trace, small.uncached_tokens, small.cached_tokens, strict=True):
        assert 1 <= uncached <= r.input_tokens
        assert uncached + cached == r.input_tokens
        assert cached % 512 == 0
    # LRU is a stack algorithm and the access sequence does not depend on hits: a larger
    # cache holds a superset of blocks at every step, so no request computes more.
    for a, b, c in zip(
        small.uncached_tokens, larger.uncached_tokens, unbounded.uncached_tokens, strict=True
    ):
        assert a >= b >= c


def test_prefix_caching_shrinks_the_shared_trace(shared_trace: Path) -> None:
    requests = read_mooncake_trace(shared_trace)
    none = Workload.from_trace(requests, 0, "no cache")
    finite = Workload.from_trace(requests, 20_000, "20K blocks")
    unbounded = Workload.from_trace(requests, None, "unbounded")
    assert none.uncached_input.mean_tokens == pytest.approx(12_035, abs=1)
    assert none.uncached_input.mean_tokens > finite.uncached_input.mean_tokens
    assert finite.uncached_input.mean_tokens > unbounded.uncached_input.mean_tokens
    # README: 36.6% of blocks are reusable with an unbounded cache (we count tokens).
    assert unbounded.prefix_hit_fraction == pytest.approx(0.366, abs=0.01)
    assert finite.mean_input_tokens == none.mean_input_tokens
