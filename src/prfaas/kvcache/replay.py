"""Sequential trace replay through one pool: the hit rate a cache of this size would see.

Each request runs the whole lifecycle (match, allocate, commit, release) before the next
arrives, so this measures the cache alone: no queueing, no concurrency, no decode. It is the
pool-side counterpart of the trace's own "reusable fraction" (the Mooncake conversation trace
quotes 36.6% of blocks with an unbounded cache) and the engine of the hit-rate-vs-capacity
curve in benchmarks/kvcache_bench.py. The simulator drives the same pool with real timing.

A request the pool cannot fit even after evicting everything unreferenced is counted as
rejected and contributes no hit (it would have to run uncached, or wait).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prfaas.kvcache.cache import HybridPrefixCache
from prfaas.kvcache.events import CacheEvent
from prfaas.kvcache.values import CacheRequest, OutOfPages

EventSink = Callable[[list[CacheEvent]], None]


@dataclass(frozen=True, slots=True)
class ReplayStats:
    num_requests: int
    num_rejected: int
    hit_blocks: int
    total_blocks: int
    hit_tokens: int
    total_tokens: int

    @property
    def block_hit_fraction(self) -> float:
        return self.hit_blocks / self.total_blocks if self.total_blocks else 0.0

    @property
    def token_hit_fraction(self) -> float:
        return self.hit_tokens / self.total_tokens if self.total_tokens else 0.0


def replay_sequential(
    cache: HybridPrefixCache,
    requests: Iterable[CacheRequest],
    event_sink: EventSink | None = None,
) -> ReplayStats:
    """Serve `requests` one after another; hand each request's events to `event_sink`."""
    num_requests = num_rejected = hit_blocks = total_blocks = hit_tokens = total_tokens = 0
    for request in requests:
        num_requests += 1
        total_blocks += len(request.block_hashes)
        total_tokens += request.num_tokens
        allocation = cache.allocate(request)
        if isinstance(allocation, OutOfPages):
            num_rejected += 1
            continue
        hit_blocks += allocation.match.hit_blocks
        hit_tokens += allocation.match.hit_tokens
        cache.commit(request.request_id)
        cache.release(request.request_id)
        events = cache.take_events()
        if event_sink is not None:
            event_sink(events)
    return ReplayStats(
        num_requests, num_rejected, hit_blocks, total_blocks, hit_tokens, total_tokens
    )
