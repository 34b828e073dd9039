"""Trace replay: Mooncake hash_ids through the pool reproduce the trace's own reuse, and a
bounded pool's hit rate never rises as its capacity shrinks."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from kvcache_fixtures import DENSE, HYBRID, make_cache

from prfaas.kvcache import (
    CacheRequest,
    ClusterId,
    GlobalKVCacheIndex,
    HybridPrefixCache,
    InstanceId,
    RequestId,
    SnapshotPolicy,
    replay_sequential,
)
from prfaas.specs.model import ModelSpec

# A trace is a list of requests, each a list of small block ids: sharing is frequent.
TRACES = st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=25)


def requests(cache: HybridPrefixCache, trace: list[list[int]]) -> list[CacheRequest]:
    scheme = cache.config.hash_scheme
    return [
        CacheRequest(RequestId(str(i)), scheme.hash_external(ids), len(ids) * 4 - i % 3)
        for i, ids in enumerate(trace)
    ]


def reusable_blocks(trace: list[list[int]]) -> int:
    """The trace's own definition: blocks whose whole prefix was seen before."""
    seen: set[tuple[int, ...]] = set()
    reused = 0
    for ids in trace:
        prefixes = [tuple(ids[: i + 1]) for i in range(len(ids))]
        reused += next((i for i, p in enumerate(prefixes) if p not in seen), len(prefixes))
        seen.update(prefixes)
    return reused


@settings(max_examples=60, deadline=None)
@given(TRACES)
def test_an_unbounded_pool_reuses_exactly_what_the_trace_says(trace: list[list[int]]) -> None:
    for spec in (DENSE, HYBRID):
        cache = make_cache(spec, num_pages=10_000)
        stats = replay_sequential(cache, requests(cache, trace))
        assert stats.num_rejected == 0
        assert stats.hit_blocks == reusable_blocks(trace)
        assert stats.total_blocks == sum(len(ids) for ids in trace)


@settings(max_examples=80, deadline=None)
@given(
    TRACES,
    st.integers(22, 40),
    st.integers(1, 10),
    st.sampled_from([DENSE, HYBRID]),
    st.sampled_from(
        [
            SnapshotPolicy.every_block(),
            SnapshotPolicy.every_k_blocks(2),
            SnapshotPolicy.request_end(),
        ]
    ),
)
def test_a_smaller_pool_never_hits_more(
    trace: list[list[int]], pages: int, more: int, spec: ModelSpec, policy: SnapshotPolicy
) -> None:
    # Every request fits the smaller pool (at most 21 pages), a parent is always more recently
    # used than its children, and where snapshots go does not depend on what is cached: so the
    # smaller pool's cached set stays a subset of the larger one's (LRU's stack property).
    # The junction policy is excluded: its snapshots depend on the cache's contents.
    hits = []
    for num_pages in (pages, pages + more):
        cache = make_cache(spec, num_pages=num_pages, policy=policy)
        stats = replay_sequential(cache, requests(cache, trace))
        assert stats.num_rejected == 0
        hits.append(stats.hit_blocks)
    assert hits[0] <= hits[1]


def test_events_drained_during_a_replay_rebuild_the_pool_in_the_index() -> None:
    cache = make_cache(HYBRID, num_pages=24, policy=SnapshotPolicy.junction())
    index = GlobalKVCacheIndex(cache.config.identity)
    index.register_instance(cache.instance_id, ClusterId("pd"), cache.config.identity)
    trace = [[0, 1, 2], [0, 1, 3], [0, 1, 2, 3], [2, 2], [0, 1, 3, 3]]
    replay_sequential(cache, requests(cache, trace), index.apply)
    for ids in [*trace, [0], [0, 1], [2]]:
        request = requests(cache, [ids])[0]
        expected = cache.match(request).hit_blocks
        assert index.match_instance(InstanceId("i0"), request.block_hashes) == expected


def test_the_conversation_trace_is_36_6_percent_reusable_through_the_pool(
    shared_trace: Path,
) -> None:
    cache = make_cache(DENSE, num_pages=300_000, block_tokens=512)
    scheme = cache.config.hash_scheme
    with shared_trace.open() as lines:
        rows = [json.loads(line) for line in lines]
    trace = [
        scheme.mooncake_request(RequestId(str(i)), row["hash_ids"], row["input_length"])
        for i, row in enumerate(rows)
    ]
    stats = replay_sequential(cache, trace)
    assert (stats.hit_blocks, stats.total_blocks) == (105_710, 288_500)
    assert round(stats.block_hit_fraction, 3) == 0.366
