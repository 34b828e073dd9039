"""The global KVCache index: what every instance of every cluster can restore, for the router.

The paper's global KVCache manager (section 3) "computes prefix matches for every cluster" on
each arrival; the scheduler needs l_prfaas and l_pd, the cached prefix in each cluster
(section 4). This index is fed only by the pools' `BlockStored` / `BlockRemoved` events, and
applies the pools' own hit rule, so for every instance its answer equals that pool's `match`
(a property test replays random operation sequences through both):

    hit(instance, h[0..n)) = largest k such that
        for all attention groups g and i < k : instance holds (g, h[i])
        for all state groups s              : instance holds (s, h[k-1])   (or k = 0)

Per cluster it answers two numbers: the best single instance (no intra-cluster move) and the
pooled hit, where each group's blocks and the boundary snapshot may come from any instance of
the cluster (the cluster's pool spans its machines' DRAM and SSD, paper section 3).

Tiers: every event names its medium, and the index keeps, per (instance, group, hash), the one
tier holding it. A unit held in any tier counts for the hit (the pool promotes what lies below
DRAM), and `IndexMatch.lower_blocks` says how many of an instance's hit blocks lie below DRAM in
some group, which is what the scheduler prices as a load (`scheduler.tiers`).

Layout: per group, hash -> {holding instance: medium}. A query walks the prompt once, shrinking
the set of instances (and clusters) still holding every block so far, so its cost is
O(blocks x holders) with set operations in C, independent of how much else is cached.

Instances register with their `CacheIdentity`; one that hashes blocks differently is refused
(a mismatch would otherwise fail silently), and re-registering an instance drops what it held
(a restart: stale peers, llm-d PR #2187).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from prfaas.kvcache.errors import EventStreamError, IncompatibleCacheError, UnknownInstanceError
from prfaas.kvcache.events import BlockStored, CacheEvent
from prfaas.kvcache.hashing import CacheIdentity
from prfaas.kvcache.ids import BlockHash, ClusterId, InstanceId
from prfaas.kvcache.layout import GroupKind
from prfaas.kvcache.tiers import Medium


@dataclass(frozen=True, slots=True)
class ClusterMatch:
    cluster_id: ClusterId
    pooled_hit_blocks: int
    best_instance_id: InstanceId | None
    best_instance_hit_blocks: int


@dataclass(frozen=True, slots=True)
class IndexMatch:
    """Hit blocks per registered instance and per cluster (0 where nothing is restorable)."""

    per_instance: Mapping[InstanceId, int]
    per_cluster: Mapping[ClusterId, ClusterMatch]
    #: Of each instance's hit blocks, how many it holds below DRAM (an attention block of the
    #: position in some group, or the boundary snapshot); absent: all in DRAM.
    lower_blocks: Mapping[InstanceId, int] = field(default_factory=dict)


class GlobalKVCacheIndex:
    def __init__(self, identity: CacheIdentity) -> None:
        self.identity = identity
        kinds = identity.group_kinds
        self._attention = [g for g, kind in enumerate(kinds) if kind is GroupKind.ATTENTION]
        self._state = [g for g, kind in enumerate(kinds) if kind is GroupKind.STATE]
        self._holders: tuple[dict[BlockHash, dict[InstanceId, Medium]], ...] = tuple(
            {} for _ in kinds
        )
        self._cluster_of: dict[InstanceId, ClusterId] = {}
        self._held: dict[InstanceId, dict[tuple[int, BlockHash], Medium]] = {}

    # --- membership ----------------------------------------------------------------------

    def register_instance(
        self, instance_id: InstanceId, cluster_id: ClusterId, identity: CacheIdentity
    ) -> None:
        """Admit an instance whose blocks hash like ours; a known one starts over (restart)."""
        if identity != self.identity:
            raise IncompatibleCacheError(
                f"instance {instance_id} hashes blocks as [{identity.describe()}], "
                f"the index as [{self.identity.describe()}]"
            )
        if instance_id in self._cluster_of:
            self.remove_instance(instance_id)
        self._cluster_of[instance_id] = cluster_id
        self._held[instance_id] = {}

    def remove_instance(self, instance_id: InstanceId) -> None:
        held = self._held_by(instance_id)
        for group, block_hash in held:
            self._drop(group, block_hash, instance_id)
        del self._held[instance_id]
        del self._cluster_of[instance_id]

    @property
    def instances(self) -> Mapping[InstanceId, ClusterId]:
        return self._cluster_of

    def num_entries(self, instance_id: InstanceId) -> int:
        return len(self._held_by(instance_id))

    def medium_of(
        self, instance_id: InstanceId, group_index: int, block_hash: BlockHash
    ) -> Medium | None:
        """The tier in which the instance holds the unit (None: it does not)."""
        return self._held_by(instance_id).get((group_index, block_hash))

    # --- events ----------------------------------------------------------------------------

    def apply(self, events: Iterable[CacheEvent]) -> None:
        """Fold a pool's drained events in, in order."""
        for event in events:
            held = self._held_by(event.instance_id)
            key = (event.group_index, event.block_hash)
            if not 0 <= event.group_index < len(self._holders):
                raise EventStreamError(f"{event}: no group {event.group_index}")
            if isinstance(event, BlockStored):
                if key in held:
                    raise EventStreamError(f"{event}: stored twice without a removal")
                held[key] = event.medium
                holders = self._holders[event.group_index].setdefault(event.block_hash, {})
                holders[event.instance_id] = event.medium
            else:
                if held.get(key) is not event.medium:
                    raise EventStreamError(f"{event}: removal of a block not stored there")
                del held[key]
                self._drop(event.group_index, event.block_hash, event.instance_id)

    # --- queries ---------------------------------------------------------------------------

    def match(
        self, block_hashes: Sequence[BlockHash], max_hit_blocks: int | None = None
    ) -> IndexMatch:
        """Longest restorable prefix of `block_hashes` on every instance and every cluster."""
        per_instance = dict.fromkeys(self._cluster_of, 0)
        pooled = dict.fromkeys(self._cluster_of.values(), 0)
        lower_so_far: dict[InstanceId, int] = {}  # positions below DRAM, attention only
        lower_blocks: dict[InstanceId, int] = {}
        limit = len(block_hashes) if max_hit_blocks is None else max_hit_blocks
        alive = set(self._cluster_of)
        alive_clusters = set(pooled)
        for position, block_hash in enumerate(block_hashes[:limit]):
            below: set[InstanceId] = set()
            for group in self._attention:
                holders = self._holders[group].get(block_hash, _EMPTY)
                alive &= holders.keys()
                alive_clusters &= {self._cluster_of[i] for i in holders}
                below |= _below_dram(holders)
            if not alive and not alive_clusters:
                break
            for instance_id in below & alive:
                lower_so_far[instance_id] = lower_so_far.get(instance_id, 0) + 1
            snapshot_instances, snapshot_clusters = alive, alive_clusters
            snapshot_below: set[InstanceId] = set()
            for group in self._state:
                holders = self._holders[group].get(block_hash, _EMPTY)
                snapshot_instances = snapshot_instances & holders.keys()
                snapshot_clusters = snapshot_clusters & {self._cluster_of[i] for i in holders}
                snapshot_below |= _below_dram(holders)
            for instance_id in snapshot_instances:
                per_instance[instance_id] = position + 1
                boundary_below = instance_id in snapshot_below and instance_id not in below
                lower = lower_so_far.get(instance_id, 0) + boundary_below
                if lower:
                    lower_blocks[instance_id] = lower
                else:
                    lower_blocks.pop(instance_id, None)
            for cluster_id in snapshot_clusters:
                pooled[cluster_id] = position + 1
        return IndexMatch(per_instance, self._per_cluster(per_instance, pooled), lower_blocks)

    def match_instance(
        self,
        instance_id: InstanceId,
        block_hashes: Sequence[BlockHash],
        max_hit_blocks: int | None = None,
    ) -> int:
        """Hit blocks on one instance: what that instance's own `match` answers."""
        self._held_by(instance_id)
        return self.match(block_hashes, max_hit_blocks).per_instance[instance_id]

    def attention_blocks(
        self,
        instance_id: InstanceId,
        block_hashes: Sequence[BlockHash],
        max_blocks: int | None = None,
    ) -> int:
        """Leading blocks of `block_hashes` whose attention KV `instance_id` holds in every
        attention group, whatever its state snapshots: what a decode instance need not be
        sent again (the router's `from_token`), which may exceed its restorable hit."""
        self._held_by(instance_id)
        limit = len(block_hashes) if max_blocks is None else max_blocks
        for position, block_hash in enumerate(block_hashes[:limit]):
            for group in self._attention:
                if instance_id not in self._holders[group].get(block_hash, _EMPTY):
                    return position
        return min(limit, len(block_hashes))

    # --- internals -------------------------------------------------------------------------

    def _held_by(self, instance_id: InstanceId) -> dict[tuple[int, BlockHash], Medium]:
        held = self._held.get(instance_id)
        if held is None:
            raise UnknownInstanceError(f"instance {instance_id} is not registered")
        return held

    def _drop(self, group: int, block_hash: BlockHash, instance_id: InstanceId) -> None:
        holders = self._holders[group][block_hash]
        del holders[instance_id]
        if not holders:
            del self._holders[group][block_hash]

    def _per_cluster(
        self, per_instance: Mapping[InstanceId, int], pooled: Mapping[ClusterId, int]
    ) -> dict[ClusterId, ClusterMatch]:
        best: dict[ClusterId, tuple[InstanceId | None, int]] = dict.fromkeys(pooled, (None, 0))
        for instance_id, hit in per_instance.items():
            cluster_id = self._cluster_of[instance_id]
            if hit > best[cluster_id][1]:
                best[cluster_id] = (instance_id, hit)
        return {c: ClusterMatch(c, pooled[c], best[c][0], best[c][1]) for c in sorted(pooled)}


def _below_dram(holders: Mapping[InstanceId, Medium]) -> set[InstanceId]:
    return {i for i, medium in holders.items() if medium is not Medium.DRAM}


_EMPTY: Mapping[InstanceId, Medium] = {}
