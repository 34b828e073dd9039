"""The facade: one instance's hybrid prefix cache pool, as the engine and the simulator see it.

    HybridPrefixCache            (this module: config, identity, storage access)
      └── CacheCoordinator       (hit rule across groups, request and transfer bookkeeping)
            ├── AttentionGroupManager x n   (block-level KV)
            ├── StateGroupManager x m       (request-level snapshots)
            └── BlockPool                   (pages, refcounts, LRU, events)

One object per serving instance. Everything is synchronous and time-free, so the simulator
and the live instance run this same code; the owner drains `take_events()` and ships the events
to the router's `GlobalKVCacheIndex`.

With `CacheConfig.lower_tier` set, evictions demote to that tier and hits promote from it
(module `tiers`). The facade carries out the pool's byte moves after each call that can make
them (`allocate`, `commit`) when it has both page and tier storage, and counts the bytes moved
either way (`TierCounters`), which is what the simulator charges load time for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from prfaas.kvcache.block_pool import BlockPool
from prfaas.kvcache.coordinator import CacheCoordinator
from prfaas.kvcache.errors import CacheConfigError, CacheMisuseError, StorageUnavailableError
from prfaas.kvcache.events import CacheEvent
from prfaas.kvcache.hashing import HASH_ALGORITHM, CacheIdentity, HashScheme, model_fingerprint
from prfaas.kvcache.ids import BlockId, InstanceId, PageId, RequestId, TransferId
from prfaas.kvcache.layout import PageLayout
from prfaas.kvcache.policy import SnapshotPolicy
from prfaas.kvcache.storage import PageStorage
from prfaas.kvcache.tiers import (
    Demoted,
    LowerTier,
    Promoted,
    TierMove,
    TierSpec,
    TierStorage,
    UnitKey,
)
from prfaas.kvcache.values import (
    Allocation,
    AllocationPlan,
    BlockInfo,
    CacheRequest,
    OutOfPages,
    PoolStats,
    PrefixMatch,
    TransferManifest,
)
from prfaas.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Everything one pool needs; build it with `for_model`.

    The default snapshot policy is request end + junction: on the conversation trace it keeps
    within about 2 points of an attention-only cache from 256 GiB per instance up, where
    snapshots at every block lose up to 27 points to the states they store (docs/kvcache.md).
    """

    layout: PageLayout
    num_pages: int
    hash_scheme: HashScheme
    snapshot_policy: SnapshotPolicy = field(default_factory=SnapshotPolicy.junction)
    lower_tier: TierSpec | None = None  # None: evicted blocks die (one DRAM tier)

    def __post_init__(self) -> None:
        if self.num_pages < 1:
            raise CacheConfigError(f"a pool needs at least one page, got {self.num_pages}")
        if self.hash_scheme.block_tokens != self.layout.block_tokens:
            raise CacheConfigError(
                f"hash blocks of {self.hash_scheme.block_tokens} tokens but layout blocks of "
                f"{self.layout.block_tokens}"
            )

    @classmethod
    def for_model(
        cls,
        spec: ModelSpec,
        *,
        block_tokens: int,
        num_pages: int | None = None,
        capacity_bytes: int | None = None,
        snapshot_policy: SnapshotPolicy | None = None,
        seed: int = 0,
        lower_tier: TierSpec | None = None,
    ) -> CacheConfig:
        """A pool of `num_pages` pages, or of as many whole pages as fit in `capacity_bytes`,
        with `lower_tier` below it if given."""
        if (num_pages is None) == (capacity_bytes is None):
            raise CacheConfigError("give exactly one of num_pages and capacity_bytes")
        layout = PageLayout.from_model(spec, block_tokens)
        if num_pages is None:
            assert capacity_bytes is not None
            num_pages = capacity_bytes // layout.page_bytes
        scheme = HashScheme(block_tokens, model_fingerprint(spec), seed)
        policy = snapshot_policy if snapshot_policy is not None else SnapshotPolicy.junction()
        return cls(layout, num_pages, scheme, policy, lower_tier)

    @property
    def capacity_bytes(self) -> int:
        return self.num_pages * self.layout.page_bytes

    @property
    def identity(self) -> CacheIdentity:
        return CacheIdentity(self.hash_scheme, HASH_ALGORITHM, self.layout.group_kinds)


@dataclass(slots=True)
class TierCounters:
    """Bytes moved between DRAM and the lower tier so far (whole pages, as the pool moves
    them): what a load from the tier costs is `promoted_bytes / read_bytes_per_s`.
    `demoted_bytes` is what eviction sent down; `failed_demotions` counts the units of it the
    tier could not store (lost, as without a tier)."""

    demoted_bytes: int = 0
    promoted_bytes: int = 0
    failed_demotions: int = 0


class HybridPrefixCache:
    """One instance's pool. See the package docstring for the request lifecycle."""

    def __init__(
        self,
        config: CacheConfig,
        instance_id: InstanceId,
        storage: PageStorage | None = None,
        tier_storage: TierStorage | None = None,
    ) -> None:
        if storage is not None and (
            storage.num_pages < config.num_pages or storage.page_bytes != config.layout.page_bytes
        ):
            raise CacheConfigError(
                f"storage of {storage.num_pages} x {storage.page_bytes} B pages cannot back "
                f"{config.num_pages} x {config.layout.page_bytes} B"
            )
        self.config = config
        self.instance_id = instance_id
        if (tier_storage is not None) != (storage is not None and config.lower_tier is not None):
            raise CacheConfigError("tier storage goes with page storage and a lower tier")
        self._storage = storage
        self._tier_storage = tier_storage
        self.tier_counters = TierCounters()
        num_groups = len(config.layout.groups)
        lower = None
        if config.lower_tier is not None:
            lower = LowerTier(config.lower_tier, config.layout.page_bytes)
        self._pool = BlockPool(config.num_pages, num_groups, instance_id, lower)
        self._coordinator = CacheCoordinator(config.layout, self._pool, config.snapshot_policy)

    @property
    def layout(self) -> PageLayout:
        return self.config.layout

    @property
    def pool(self) -> BlockPool:
        """The underlying block pool, for audits and tests; mutate only through this facade."""
        return self._pool

    # --- the request lifecycle -------------------------------------------------------------

    def match(self, request: CacheRequest) -> PrefixMatch:
        return self._coordinator.match(request)

    def dram_match(self, request: CacheRequest) -> PrefixMatch:
        """The longest hit restorable from DRAM alone (no promotion): for readers of pool pages
        that do not allocate, such as a prefix export. Side-effect free."""
        match = self._coordinator.match(request)
        while match.promotions:
            cap = min(p.hit_block for p in match.promotions)
            match = self._coordinator.match(dataclasses.replace(request, max_hit_blocks=cap))
        return match

    def plan(self, request: CacheRequest, match: PrefixMatch | None = None) -> AllocationPlan:
        return self._coordinator.plan(request, self._fresh(request, match))

    def can_allocate(self, request: CacheRequest, match: PrefixMatch | None = None) -> bool:
        return self.plan(request, match).fits

    def allocate(
        self,
        request: CacheRequest,
        match: PrefixMatch | None = None,
        *,
        defer_promotions: bool = False,
    ) -> Allocation | OutOfPages:
        """Reference the matched prefix and allocate the rest, evicting LRU blocks if needed.
        `OutOfPages` (nothing changed) when even a full eviction would not make room.

        Units of the hit held in the lower tier are loaded back into their new pages, or, with
        `defer_promotions`, only reserved: the bookkeeping (pages, events, counters) is done
        and `Allocation.pending_loads` names what the caller must read into which pages before
        it reads them (the engine loads them layer by layer while its prefill runs).

        A load that fails here (a unit missing or torn: `CacheMisuseError`, re-raised) leaves
        nothing behind: the request is `abandon`ed and the tier's bytes of its units deleted."""
        allocation = self._coordinator.allocate(request, match)
        moves = self._pool.take_moves()
        try:
            self._carry_out(moves, load_promotions=not defer_promotions)
        except CacheMisuseError:  # a unit's bytes missing or torn: the request gets nothing
            loads = [move.key for move in moves if isinstance(move, Promoted)]
            assert self._tier_storage is not None  # only a load from it can fail
            for key in loads:
                self._tier_storage.delete(key)
            self.abandon(request.request_id, loads)
            raise
        if defer_promotions and isinstance(allocation, Allocation):
            pending = tuple(m for m in moves if isinstance(m, Promoted))
            allocation = dataclasses.replace(allocation, pending_loads=pending)
        return allocation

    def commit(self, request_id: RequestId, num_blocks: int | None = None) -> int:
        stored = self._coordinator.commit(request_id, num_blocks)
        self._carry_out(self._pool.take_moves())
        return stored

    def release(self, request_id: RequestId) -> None:
        self._coordinator.release(request_id)

    def abandon(self, request_id: RequestId, unloaded: Sequence[UnitKey]) -> None:
        """Release a request whose units promoted from the lower tier did not all arrive (a
        failed load, or a prefill that failed while loading them): `unloaded` leave the
        prefix cache first (`BlockPool.uncache`: `BlockRemoved`, nothing demoted), so their
        partly written pages are freed with the request's and never reused."""
        for key in unloaded:
            self._pool.uncache(key)
        self.release(request_id)

    def begin_transfer(self, request_id: RequestId, first_block: int = 0) -> TransferManifest:
        return self._coordinator.begin_transfer(request_id, first_block)

    def complete_transfer(self, transfer_id: TransferId) -> None:
        self._coordinator.complete_transfer(transfer_id)

    def insert_prefix(self, request: CacheRequest, tokens: int) -> int:
        """Cache the first `tokens` of `request` (rounded up to whole blocks) as a receiver of a
        moved prefix stores it: its blocks and the state snapshot at its end, committed and
        unpinned at once. Returns the blocks written; 0 when a full pool (nothing evictable)
        has no room, which leaves the pool as it was."""
        block = self.config.layout.block_tokens
        num_blocks = min(-(-tokens // block), len(request.block_hashes))
        if num_blocks <= 0:
            return 0
        moved = CacheRequest(
            RequestId(f"{request.request_id}/moved"),
            request.block_hashes[:num_blocks],
            min(num_blocks * block, request.num_tokens),
        )
        if isinstance(self.allocate(moved), OutOfPages):
            return 0
        self.commit(moved.request_id)
        self.release(moved.request_id)
        return num_blocks

    def take_events(self) -> list[CacheEvent]:
        return self._pool.take_events()

    def stats(self) -> PoolStats:
        pool = self._pool
        return PoolStats(
            num_pages=pool.num_pages,
            num_free_pages=pool.num_free_pages,
            num_evictable_pages=pool.num_evictable_pages,
            num_cached_blocks=pool.num_cached_blocks,
            num_live_blocks=pool.num_live_blocks,
            num_requests=self._coordinator.num_requests,
            num_transfers=self._coordinator.num_transfers,
            num_lower_pages=pool.lower.used_pages if pool.lower is not None else 0,
        )

    # --- block contents ------------------------------------------------------------------

    def block_info(self, block_id: BlockId) -> BlockInfo:
        return self._pool.info(block_id)

    def pages_of(self, block_id: BlockId) -> tuple[PageId, ...]:
        return self._pool.info(block_id).pages

    def write_block(self, block_id: BlockId, data: bytes) -> None:
        self._require_storage().write(self.pages_of(block_id), data)

    def read_block(self, block_id: BlockId) -> bytes:
        """The block's unit bytes (its group's block or snapshot size, padding excluded)."""
        info = self._pool.info(block_id)
        unit_bytes = self.layout.groups[info.group_index].unit_bytes
        return self._require_storage().read(info.pages, unit_bytes)

    def copy_block(self, source: BlockId, target: BlockId) -> None:
        """Copy a unit within one group: restore a snapshot into the live state, or take one."""
        self._require_storage().copy(self.pages_of(source), self.pages_of(target))

    def _carry_out(self, moves: list[TierMove], *, load_promotions: bool = True) -> None:
        """Move the bytes the pool's bookkeeping moved, in order: a demoted unit's pages are
        read before a promotion in the same call may overwrite them. Without
        `load_promotions`, promotions are only counted (their caller loads them later, after
        this call's demotions have read their pages)."""
        page_bytes = self.config.layout.page_bytes
        for move in moves:
            if isinstance(move, Demoted):
                self.tier_counters.demoted_bytes += len(move.pages) * page_bytes
            elif isinstance(move, Promoted):
                self.tier_counters.promoted_bytes += len(move.pages) * page_bytes
            if self._storage is None or self._tier_storage is None:
                continue
            unit_bytes = self.layout.groups[move.key[0]].unit_bytes
            if isinstance(move, Demoted):
                self._demote(move, self._storage.read(move.pages, unit_bytes))
            elif isinstance(move, Promoted):
                if load_promotions:
                    data = self._tier_storage.get(move.key)
                    if len(data) != unit_bytes:
                        raise CacheMisuseError(f"unit {move.key} is torn: {len(data)} bytes")
                    self._storage.write(move.pages, data)
                    self._tier_storage.delete(move.key)
            else:
                self._tier_storage.delete(move.key)

    def _demote(self, move: Demoted, data: bytes) -> None:
        """Write an evicted unit to the tier; when the tier cannot take it (a full or failing
        disk), the unit is forgotten there (`BlockPool.unstore`) and counted, never raised:
        losing a cached unit costs a recompute, failing the request that evicted it would
        cost the request."""
        assert self._tier_storage is not None
        try:
            self._tier_storage.put(move.key, data)
        except OSError:
            self._pool.unstore(move.key)
            self.tier_counters.failed_demotions += 1

    def _require_storage(self) -> PageStorage:
        if self._storage is None:
            raise StorageUnavailableError(f"instance {self.instance_id} keeps bookkeeping only")
        return self._storage

    def _fresh(self, request: CacheRequest, match: PrefixMatch | None) -> PrefixMatch:
        if match is None or match.epoch != self._pool.epoch:
            return self._coordinator.match(request)
        return match
