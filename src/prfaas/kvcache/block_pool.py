"""The block pool: N equal pages, the blocks built from them, refcounts and the LRU.

Every group of the layout allocates here (one page size, see `layout`). A block is a fixed number
of pages owned by one group; its pages are exclusive to it while it lives. Each page is, at any
moment, in exactly one place:

    free list  <-- freed / evicted ---  live block (ref_count >= 1, or 0 if cached: in the LRU)
         \\-------- acquire ---------->

A cached block whose last holder lets go stays live with ref_count 0 and joins the tail of the
LRU; `acquire` takes free pages first and evicts from the LRU head only when they run short, so
the cache keeps everything it can. Evicting is the only way a cached block dies, and it emits
`BlockRemoved`; `uncache` takes a block out of the prefix cache the same way (same event, no
demotion) when its bytes cannot be trusted, and it then dies as a private block. A private
block (never cached, or a duplicate of a cached one) is freed as soon as its ref_count
reaches 0.

Fresh pages are handed out in id order before recycled ones, and freed pages join the back of
the queue: the same order as one FIFO free queue (vLLM's), so block and page ids in tests are
exact. The pool keeps no clock: LRU order is the order of releases.

With a `LowerTier` (module `tiers`), eviction demotes instead of killing: the victim leaves
DRAM (`BlockRemoved`) and enters the tier (`BlockStored` with its medium), and `acquire` can
promote units back into fresh pages. Each move of bytes is recorded as a `TierMove` command,
in the order the pages changed hands, for the owner to carry out (`take_moves`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, cast

from prfaas.kvcache.errors import (
    BlockStateError,
    CacheConfigError,
    DoubleFreeError,
    RefcountUnderflowError,
    UnknownBlockError,
)
from prfaas.kvcache.events import BlockRemoved, BlockStored, CacheEvent
from prfaas.kvcache.ids import BlockHash, BlockId, InstanceId, PageId
from prfaas.kvcache.tiers import Demoted, Dropped, LowerTier, Medium, Promoted, TierMove, UnitKey
from prfaas.kvcache.values import BlockInfo, BlockKind, Promotion


@dataclass(slots=True)
class _Block:
    group_index: int
    kind: BlockKind
    pages: tuple[PageId, ...]
    ref_count: int
    block_hash: BlockHash | None = None


@dataclass(frozen=True, slots=True)
class NewBlock:
    """One block `acquire` should create."""

    group_index: int
    num_pages: int
    kind: BlockKind


class BlockPool:
    def __init__(
        self,
        num_pages: int,
        num_groups: int,
        instance_id: InstanceId,
        lower: LowerTier | None = None,
    ) -> None:
        if num_pages < 1:
            raise CacheConfigError(f"a pool needs at least one page, got {num_pages}")
        self._num_pages = num_pages
        self._instance_id = instance_id
        self._next_fresh_page = 0
        # Freed pages as the runs their blocks held, oldest first: one deque entry per block
        # keeps the FIFO page order while moving a 50-page snapshot in one step.
        self._recycled: deque[tuple[PageId, ...]] = deque()
        self._num_recycled = 0
        self._blocks: dict[BlockId, _Block] = {}
        self._next_block_id = 0
        self._lru: OrderedDict[BlockId, None] = OrderedDict()
        self._num_evictable_pages = 0
        self._cached: tuple[dict[BlockHash, BlockId], ...] = tuple({} for _ in range(num_groups))
        self._events: list[CacheEvent] = []
        self._epoch = 0
        self._lower = lower
        self._moves: list[TierMove] = []

    # --- queries (no side effects) -----------------------------------------------------

    @property
    def num_pages(self) -> int:
        return self._num_pages

    @property
    def num_free_pages(self) -> int:
        return self._num_pages - self._next_fresh_page + self._num_recycled

    @property
    def num_evictable_pages(self) -> int:
        return self._num_evictable_pages

    @property
    def epoch(self) -> int:
        """Evictions and lower-tier changes so far: a match computed at an older epoch may be
        stale."""
        return self._epoch

    @property
    def lower(self) -> LowerTier | None:
        """The tier evictions demote to (None: evicted blocks die); read-only for callers."""
        return self._lower

    def lower_holds(self, group_index: int, block_hash: BlockHash) -> bool:
        return self._lower is not None and self._lower.holds((group_index, block_hash))

    @property
    def num_live_blocks(self) -> int:
        return len(self._blocks)

    @property
    def num_cached_blocks(self) -> int:
        return sum(len(cached) for cached in self._cached)

    def cached_blocks(self, group_index: int) -> Mapping[BlockHash, BlockId]:
        """The group's prefix cache: hash -> block. A live view; do not hold it across calls."""
        return self._cached[group_index]

    def available_pages(self, touching: Sequence[BlockId] = ()) -> int:
        """Pages `acquire(touching, ...)` could hand out: free plus evictable, less the
        evictable pages of the blocks it would touch."""
        pinned = 0
        for block_id in touching:
            block = self._get(block_id)
            if block.ref_count == 0:
                pinned += len(block.pages)
        return self.num_free_pages + self._num_evictable_pages - pinned

    def info(self, block_id: BlockId) -> BlockInfo:
        b = self._get(block_id)
        return BlockInfo(block_id, b.group_index, b.kind, b.pages, b.ref_count, b.block_hash)

    def blocks(self) -> Iterator[BlockInfo]:
        """Every live block, for audits and tests."""
        for block_id in list(self._blocks):
            yield self.info(block_id)

    def free_pages(self) -> frozenset[PageId]:
        """The free list as a set, for audits and tests (O(num_pages))."""
        fresh = range(self._next_fresh_page, self._num_pages)
        recycled = (page for run in self._recycled for page in run)
        return frozenset(PageId(p) for p in fresh) | frozenset(recycled)

    def eviction_order(self) -> tuple[BlockId, ...]:
        """Unreferenced cached blocks, next victim first."""
        return tuple(self._lru)

    # --- mutations -----------------------------------------------------------------------

    def acquire(
        self,
        touching: Sequence[BlockId],
        new: Sequence[NewBlock],
        promote: Sequence[Promotion] = (),
    ) -> list[BlockId] | None:
        """Atomically take a reference on `touching`, create `new` blocks (ref_count 1) and
        move `promote` units up from the lower tier into cached blocks (ref_count 1), evicting
        LRU blocks if free pages run short. Returns the new ids, then the promoted ones. None,
        with nothing changed, when even evicting every unreferenced cached block would not
        make room."""
        needed = sum(spec.num_pages for spec in new) + sum(p.num_pages for p in promote)
        if needed > self.available_pages(touching):
            return None
        for promotion in promote:  # out of the tier first: demotions must not drop them
            self._take_lower((promotion.group_index, promotion.block_hash))
        for block_id in touching:
            self.touch(block_id)
        self._make_room(needed)
        created = [self._create(spec) for spec in new]
        return created + [self._promote(p) for p in promote]

    def touch(self, block_id: BlockId) -> None:
        """Take one more reference; an unreferenced cached block leaves the LRU."""
        block = self._blocks.get(block_id) or self._missing(block_id)
        if block.ref_count == 0:
            del self._lru[block_id]
            self._num_evictable_pages -= len(block.pages)
        block.ref_count += 1

    def release(self, block_id: BlockId) -> None:
        """Drop one reference. At zero a cached block joins the LRU tail; a private one is freed."""
        block = self._blocks.get(block_id) or self._missing(block_id)
        if block.ref_count == 0:
            raise RefcountUnderflowError(f"block {block_id} is released but nobody holds it")
        block.ref_count -= 1
        if block.ref_count:
            return
        if block.block_hash is None:
            self._free(block_id, block)
        else:
            self._lru[block_id] = None
            self._num_evictable_pages += len(block.pages)

    def cache(self, block_id: BlockId, block_hash: BlockHash) -> bool:
        """Publish a held PREFIX block under `block_hash` in its group's prefix cache.

        False when another block already holds that hash in the group: this one stays private
        and is freed on its last release (the cache keeps one copy of each prefix).
        """
        block = self._blocks.get(block_id) or self._missing(block_id)
        if block.kind is not BlockKind.PREFIX or block.block_hash is not None:
            raise BlockStateError(f"block {block_id} is a {block.kind} block or cached already")
        if block.ref_count == 0:
            raise BlockStateError(f"block {block_id} is cached but nobody holds it")
        cached = self._cached[block.group_index]
        if block_hash in cached:
            return False
        key = (block.group_index, block_hash)
        if self._lower is not None and self._lower.holds(key):  # computed afresh: one copy
            self._take_lower(key)
            self._moves.append(Dropped(key))
        cached[block_hash] = block_id
        block.block_hash = block_hash
        self._events.append(BlockStored(self._instance_id, block.group_index, block_hash))
        return True

    def uncache(self, key: UnitKey) -> None:
        """Take a cached unit out of the prefix cache without demoting it: a load into its
        pages failed, so they may hold part of its bytes. The eviction's `BlockRemoved` is
        emitted; the block becomes private, freed now if unreferenced, else on its last
        release. A later request finds no such unit and computes it afresh."""
        group_index, block_hash = key
        block_id = self._cached[group_index].get(block_hash)
        if block_id is None:
            raise UnknownBlockError(f"unit {key} is not cached in DRAM")
        block = self._blocks[block_id]
        self._forget(block)
        if block.ref_count == 0:
            del self._lru[block_id]
            self._num_evictable_pages -= len(block.pages)
            self._free(block_id, block)

    def unstore(self, key: UnitKey) -> None:
        """Forget a unit the lower tier was to hold: writing its bytes there failed (a full or
        failing disk). Its `BlockRemoved` for that medium is emitted, so every index drops
        it; the unit is lost as an eviction without a tier would lose it. A unit a later
        demotion already dropped is left as it is."""
        if self._lower is not None and self._lower.holds(key):
            self._take_lower(key)

    def take_events(self) -> list[CacheEvent]:
        events, self._events = self._events, []
        return events

    def take_moves(self) -> list[TierMove]:
        """The byte moves since the last call, in the order they must be carried out."""
        moves, self._moves = self._moves, []
        return moves

    # --- internals -----------------------------------------------------------------------

    def _get(self, block_id: BlockId) -> _Block:
        return self._blocks.get(block_id) or self._missing(block_id)

    def _missing(self, block_id: BlockId) -> NoReturn:
        if 0 <= block_id < self._next_block_id:
            raise DoubleFreeError(f"block {block_id} was already freed or evicted")
        raise UnknownBlockError(f"block {block_id} was never allocated by this pool")

    def _create(self, spec: NewBlock) -> BlockId:
        pages = self._take_pages(spec.num_pages)
        block_id = BlockId(self._next_block_id)
        self._next_block_id += 1
        self._blocks[block_id] = _Block(spec.group_index, spec.kind, pages, ref_count=1)
        return block_id

    def _take_pages(self, num_pages: int) -> tuple[PageId, ...]:
        """Fresh pages in id order first, then recycled ones oldest first (one FIFO queue)."""
        pages: tuple[PageId, ...] = ()
        start = self._next_fresh_page
        if start < self._num_pages:
            num_fresh = min(num_pages, self._num_pages - start)
            self._next_fresh_page = start + num_fresh
            pages = cast(tuple[PageId, ...], tuple(range(start, start + num_fresh)))
        needed = num_pages - len(pages)
        self._num_recycled -= needed
        runs = self._recycled
        while needed:
            run = runs.popleft()
            if len(run) > needed:  # split: the rest stays first in line
                runs.appendleft(run[needed:])
                run = run[:needed]
            pages = pages + run if pages else run
            needed -= len(run)
        return pages

    def _make_room(self, num_pages: int) -> None:
        deficit = num_pages - self.num_free_pages
        while deficit > 0:
            block_id, _ = self._lru.popitem(last=False)
            block = self._blocks[block_id]
            deficit -= len(block.pages)
            self._num_evictable_pages -= len(block.pages)
            assert block.block_hash is not None  # only cached blocks enter the LRU
            self._demote(self._forget(block), block.pages)
            self._free(block_id, block)

    def _forget(self, block: _Block) -> UnitKey:
        """Drop a cached block's hash from its group's prefix cache (`BlockRemoved`, a new
        epoch); returns the unit it held."""
        assert block.block_hash is not None
        key = (block.group_index, block.block_hash)
        del self._cached[block.group_index][block.block_hash]
        block.block_hash = None
        self._events.append(BlockRemoved(self._instance_id, *key))
        self._epoch += 1
        return key

    def _demote(self, key: UnitKey, pages: tuple[PageId, ...]) -> None:
        """Move an evicted unit to the lower tier when it fits there (dropping its oldest)."""
        if self._lower is None:
            return
        dropped = self._lower.admit(key, len(pages))
        if dropped is None:
            return
        medium = self._lower.spec.medium
        for victim in dropped:
            self._events.append(BlockRemoved(self._instance_id, victim[0], victim[1], medium))
            self._moves.append(Dropped(victim))
        self._events.append(BlockStored(self._instance_id, key[0], key[1], medium))
        self._moves.append(Demoted(key, pages))

    def _take_lower(self, key: UnitKey) -> None:
        assert self._lower is not None
        self._lower.take(key)
        self._epoch += 1
        self._events.append(
            BlockRemoved(self._instance_id, key[0], key[1], self._lower.spec.medium)
        )

    def _promote(self, promotion: Promotion) -> BlockId:
        """A cached block (ref_count 1) in fresh pages for a unit taken out of the lower tier."""
        spec = NewBlock(promotion.group_index, promotion.num_pages, BlockKind.PREFIX)
        block_id = self._create(spec)
        block = self._blocks[block_id]
        block.block_hash = promotion.block_hash
        self._cached[promotion.group_index][promotion.block_hash] = block_id
        key = (promotion.group_index, promotion.block_hash)
        self._events.append(BlockStored(self._instance_id, key[0], key[1], Medium.DRAM))
        self._moves.append(Promoted(key, block.pages))
        return block_id

    def _free(self, block_id: BlockId, block: _Block) -> None:
        del self._blocks[block_id]
        self._recycled.append(block.pages)
        self._num_recycled += len(block.pages)
