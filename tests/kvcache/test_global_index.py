"""The global index: per-instance and per-cluster answers from events, and handshake checks."""

from __future__ import annotations

import pytest
from kvcache_fixtures import DENSE, HYBRID, ext_request, make_cache

from prfaas.kvcache import (
    BlockHash,
    BlockRemoved,
    BlockStored,
    ClusterId,
    ClusterMatch,
    EventStreamError,
    GlobalKVCacheIndex,
    HybridPrefixCache,
    IncompatibleCacheError,
    InstanceId,
    RequestId,
    SnapshotPolicy,
    UnknownInstanceError,
)

PRFAAS, PD = ClusterId("prfaas"), ClusterId("pd")


def serve(cache: HybridPrefixCache, name: str, ids: list[int]) -> None:
    cache.allocate(ext_request(cache, name, ids))
    cache.commit(RequestId(name))
    cache.release(RequestId(name))


def deployment() -> tuple[GlobalKVCacheIndex, dict[str, HybridPrefixCache]]:
    caches = {
        name: make_cache(HYBRID, policy=SnapshotPolicy.request_end(), instance=name)
        for name in ("p0", "d0", "d1")
    }
    index = GlobalKVCacheIndex(caches["p0"].config.identity)
    for name, cache in caches.items():
        cluster = PRFAAS if name.startswith("p") else PD
        index.register_instance(InstanceId(name), cluster, cache.config.identity)
    return index, caches


def test_the_index_answers_per_instance_and_per_cluster() -> None:
    index, caches = deployment()
    serve(caches["p0"], "a", [1, 2, 3, 4])
    serve(caches["d0"], "b", [1, 2])
    serve(caches["d1"], "c", [1, 2, 3])
    for cache in caches.values():
        index.apply(cache.take_events())
    query = ext_request(caches["p0"], "q", [1, 2, 3, 4, 5]).block_hashes
    result = index.match(query)
    assert dict(result.per_instance) == {"p0": 4, "d0": 2, "d1": 3}
    assert result.per_cluster == {
        PD: ClusterMatch(PD, 3, InstanceId("d1"), 3),
        PRFAAS: ClusterMatch(PRFAAS, 4, InstanceId("p0"), 4),
    }
    assert index.match(query, max_hit_blocks=2).per_instance[InstanceId("p0")] == 0
    assert index.match_instance(InstanceId("d0"), query) == 2


def test_a_cluster_pool_may_combine_blocks_and_snapshots_of_different_instances() -> None:
    index = GlobalKVCacheIndex(make_cache(HYBRID).config.identity)
    identity = index.identity
    for name in ("d0", "d1"):
        index.register_instance(InstanceId(name), PD, identity)
    h = ext_request(make_cache(HYBRID), "q", [1, 2]).block_hashes
    index.apply(
        [
            BlockStored(InstanceId("d0"), 0, h[0]),
            BlockStored(InstanceId("d0"), 0, h[1]),
            BlockStored(InstanceId("d1"), 1, h[1]),  # the state at boundary 2 lives elsewhere
        ]
    )
    result = index.match(h)
    assert dict(result.per_instance) == {"d0": 0, "d1": 0}
    assert result.per_cluster[PD] == ClusterMatch(PD, 2, None, 0)


def test_removals_and_restarts_take_blocks_out() -> None:
    index, caches = deployment()
    serve(caches["d0"], "a", [1, 2])
    index.apply(caches["d0"].take_events())
    query = ext_request(caches["d0"], "q", [1, 2]).block_hashes
    assert index.num_entries(InstanceId("d0")) == 3
    index.apply([BlockRemoved(InstanceId("d0"), 1, query[1])])
    assert index.match_instance(InstanceId("d0"), query) == 0
    index.register_instance(InstanceId("d0"), PD, caches["d0"].config.identity)  # restart
    assert index.num_entries(InstanceId("d0")) == 0
    index.remove_instance(InstanceId("d0"))
    assert InstanceId("d0") not in index.instances
    with pytest.raises(UnknownInstanceError):
        index.match_instance(InstanceId("d0"), query)


def test_an_instance_that_hashes_differently_is_refused_at_registration() -> None:
    index = GlobalKVCacheIndex(make_cache(HYBRID).config.identity)
    for other in (make_cache(DENSE), make_cache(HYBRID, block_tokens=8)):
        with pytest.raises(IncompatibleCacheError, match="hashes blocks as"):
            index.register_instance(InstanceId("x"), PD, other.config.identity)


def test_a_contradictory_event_stream_is_refused() -> None:
    index, _ = deployment()
    d0 = InstanceId("d0")
    with pytest.raises(EventStreamError):
        index.apply([BlockRemoved(d0, 0, BlockHash(1))])
    index.apply([BlockStored(d0, 0, BlockHash(1))])
    with pytest.raises(EventStreamError):
        index.apply([BlockStored(d0, 0, BlockHash(1))])
    with pytest.raises(EventStreamError):
        index.apply([BlockStored(d0, 7, BlockHash(1))])
    with pytest.raises(UnknownInstanceError):
        index.apply([BlockStored(InstanceId("ghost"), 0, BlockHash(1))])


def test_attention_blocks_count_what_is_held_past_the_last_snapshot() -> None:
    """A hybrid pool that snapshots state only at a request's end restores nothing of a
    prompt that diverges before that end, yet holds its attention KV up to the divergence:
    what a decode instance need not be sent again (the router's `from_token`)."""
    index, caches = deployment()
    serve(caches["d0"], "a", [1, 2, 3, 4])
    index.apply(caches["d0"].take_events())
    query = ext_request(caches["d0"], "q", [1, 2, 3, 9]).block_hashes
    d0 = InstanceId("d0")
    assert index.match_instance(d0, query) == 0
    assert index.attention_blocks(d0, query) == 3
    assert index.attention_blocks(d0, query, max_blocks=2) == 2
    assert index.attention_blocks(InstanceId("d1"), query) == 0
    with pytest.raises(UnknownInstanceError):
        index.attention_blocks(InstanceId("nobody"), query)
