"""Post-prefix-match lengths: replay a trace's `hash_ids` through a bounded LRU prefix cache.

The paper re-searches the threshold over the *post-prefix-match* length distribution (section
4): what a prefill instance computes is the prompt minus its cached prefix. This module turns a
trace into those uncached lengths with the smallest model that captures it:

* one pooled cache of `capacity_blocks` blocks (what the global KVCache manager sees when it may
  move caches between clusters), LRU eviction, `None` = unbounded, 0 = no cache;
* only full blocks are cached and matched (a prefix-cache block is reusable only when full); a
  hit is the longest run of leading full blocks all present in the cache;
* at least one token is always computed (a full hit still runs the last token for its logits);
* after its prefill, every full block of the request is inserted or refreshed, oldest first, so
  a request's own prefix is the most recently used part of it.

Worked example, 512-token blocks, input 1,300 tokens (blocks a, b full; c partial), cache {a}:
    hit = 1 block = 512 tokens  ->  uncached = 1,300 - 512 = 788 tokens; cache becomes {a, b}.

The real hybrid pool (attention blocks plus state snapshots) lives in `kvcache`; this replay is
the planner's estimate of its effect.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


class LruBlockCache:
    """A set of block ids with least-recently-used eviction beyond `capacity_blocks`."""

    def __init__(self, capacity_blocks: int | None) -> None:
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError("capacity_blocks must not be negative")
        self._capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._blocks

    def matched_prefix_blocks(self, block_ids: Sequence[int]) -> int:
        """How many leading blocks are all cached (does not refresh them)."""
        count = 0
        for block_id in block_ids:
            if block_id not in self._blocks:
                break
            count += 1
        return count

    def touch(self, block_ids: Iterable[int]) -> None:
        """Insert or refresh blocks in order (the last one ends most recent), then evict."""
        if self._capacity == 0:
            return
        for block_id in block_ids:
            self._blocks[block_id] = None
            self._blocks.move_to_end(block_id)
        if self._capacity is not None:
            while len(self._blocks) > self._capacity:
                self._blocks.popitem(last=False)


@dataclass(frozen=True, slots=True)
class PrefixReplay:
    """Per request (in replay order): tokens to prefill and tokens served from the cache."""

    uncached_tokens: tuple[int, ...]
    cached_tokens: tuple[int, ...]
    #: The uncached length a router judged each request by at dispatch, where a model knows
    #: it differs from what the prefill computed (`scheduler.hit_model`); None: the same.
    routed_tokens: tuple[int, ...] | None = None

    @property
    def hit_fraction(self) -> float:
        """Share of all input tokens served from the cache."""
        total = sum(self.uncached_tokens) + sum(self.cached_tokens)
        return sum(self.cached_tokens) / total


def replay_prefix_cache(
    requests: Sequence[TraceRequest],
    capacity_blocks: int | None,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> PrefixReplay:
    """Uncached length of each request after the prefix match (see the module docstring)."""
    cache = LruBlockCache(capacity_blocks)
    uncached: list[int] = []
    cached: list[int] = []
    for request in requests:
        full_blocks = request.hash_ids[: request.input_tokens // block_tokens]
        hit_tokens = cache.matched_prefix_blocks(full_blocks) * block_tokens
        hit_tokens = min(hit_tokens, request.input_tokens - 1)
        cache.touch(full_blocks)
        uncached.append(request.input_tokens - hit_tokens)
        cached.append(hit_tokens)
    return PrefixReplay(tuple(uncached), tuple(cached))
