"""Cache events: what a pool tells the outside world about its prefix cache.

Pull-based, like vLLM's block pool: the pool appends past-tense events as blocks enter and leave
its prefix cache, and its owner drains them with `take_events()` (the engine publishes them to
the router; the simulator feeds them to the index directly). No callbacks run inside the pool.

A `BlockStored` names a (group, chained hash) that has just become restorable on an instance;
`BlockRemoved` one that just stopped being so. For state groups the hash is the prefix hash at
the snapshot's boundary. Per (instance, group, hash) the events strictly alternate, starting
with a store, which is what lets `GlobalKVCacheIndex` reject a corrupted stream.

Each event names the `medium` of the tier the unit entered or left. A demotion is a removal
from DRAM followed by a store on disk, a promotion the reverse, so a unit is held in one tier
of an instance at a time and a removal names the medium of the store it ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.kvcache.ids import BlockHash, InstanceId
from prfaas.kvcache.tiers import Medium


@dataclass(frozen=True, slots=True)
class BlockStored:
    instance_id: InstanceId
    group_index: int
    block_hash: BlockHash
    medium: Medium = Medium.DRAM


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    instance_id: InstanceId
    group_index: int
    block_hash: BlockHash
    medium: Medium = Medium.DRAM


CacheEvent = BlockStored | BlockRemoved
