"""The coordinator: one request's blocks across every group, and the hybrid hit rule.

A hit of k blocks needs, at the same time (paper section 3; a hit that restores attention KV without
the recurrent state gives wrong output):
    every attention group   has the k blocks h[0..k-1] cached      (partial prefix match)
    every state group       has a snapshot stored under h[k-1]      (exact boundary only)
so the coordinator first walks the attention groups (each can only shorten the prefix), then
walks back from there to the deepest boundary that every state group can restore.

When the state hit is shorter than the attention match (k < a), the request recomputes tokens
k*B..a*B only to rebuild its state: their attention blocks are cached and correct already, so
the request references them (read-only) instead of allocating duplicates. That saves the pages
and keeps those blocks as fresh in the LRU as if they had been hit, which is what makes the hit
rate of a bounded pool fall monotonically with its capacity.

Lifecycle of a request (all calls synchronous, time-free):

    match ──> allocate ──> commit (once, or per chunk) ──> release
                  │                 └─ begin_transfer ──> complete_transfer (receiver acked)
                  └─ OutOfPages: nothing changed; queue or back off

Release order is deepest-first: the LRU evicts the end of a prompt before its start, so a
chain is not cut in the middle while its tail lingers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prfaas.kvcache.block_pool import BlockPool, NewBlock
from prfaas.kvcache.errors import (
    DuplicateRequestError,
    InvalidRequestError,
    UnknownRequestError,
    UnknownTransferError,
)
from prfaas.kvcache.ids import BlockHash, BlockId, RequestId, TransferId
from prfaas.kvcache.layout import PageLayout
from prfaas.kvcache.managers import AttentionGroupManager, StateGroupManager
from prfaas.kvcache.policy import SnapshotPolicy
from prfaas.kvcache.values import (
    Allocation,
    AllocationPlan,
    AttentionBlocks,
    CacheRequest,
    OutOfPages,
    PrefixMatch,
    Promotion,
    StateBlocks,
    TransferManifest,
)


@dataclass(slots=True)
class _Held:
    """What one request holds: per attention group its block table (hits, new, tail), per state
    group its live block and snapshots by boundary (the restored one included)."""

    request: CacheRequest
    reused_blocks: int
    num_tail_blocks: int
    boundaries: tuple[int, ...]
    tables: list[list[BlockId]]
    live: list[BlockId]
    snapshots: list[dict[int, BlockId]]
    committed_blocks: int


class CacheCoordinator:
    def __init__(self, layout: PageLayout, pool: BlockPool, policy: SnapshotPolicy) -> None:
        self._block_tokens = layout.block_tokens
        self._pool = pool
        self._policy = policy
        self._attention = tuple(AttentionGroupManager(g, pool) for g in layout.attention_groups)
        self._state = tuple(StateGroupManager(g, pool) for g in layout.state_groups)
        self._requests: dict[RequestId, _Held] = {}
        self._transfers: dict[TransferId, list[BlockId]] = {}
        self._next_transfer_id = 0

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    @property
    def num_transfers(self) -> int:
        return len(self._transfers)

    # --- queries -------------------------------------------------------------------------

    def match(self, request: CacheRequest) -> PrefixMatch:
        """Longest prefix every group can restore from some tier; no side effects.

        Units of the hit held below DRAM become `promotions`. Past the hit, only attention
        blocks in DRAM are shared (the request recomputes those tokens to rebuild its state,
        so a block held lower is computed afresh rather than loaded)."""
        hashes = self._validate(request)
        limit = len(hashes)
        tables: list[list[BlockId | None]] = []
        for manager in self._attention:
            tables.append(manager.cached_prefix(hashes, limit))
            limit = len(tables[-1])
        cap = limit if request.max_hit_blocks is None else min(limit, request.max_hit_blocks)
        hit = self._deepest_restorable(hashes, cap)
        reach = hit
        while reach < limit and all(table[reach] is not None for table in tables):
            reach += 1
        promotions = [
            Promotion(m.group.index, position, hashes[position], m.group.pages_per_unit)
            for m, table in zip(self._attention, tables, strict=True)
            for position in range(hit)
            if table[position] is None
        ]
        snapshot_ids: list[BlockId] = []
        for state in self._state if hit else ():
            snapshot = state.snapshot_at(hashes[hit - 1])
            if snapshot is None:
                group = state.group
                promotions.append(
                    Promotion(
                        group.index, hit, hashes[hit - 1], group.pages_per_unit, is_snapshot=True
                    )
                )
            else:
                snapshot_ids.append(snapshot)
        return PrefixMatch(
            hit_blocks=hit,
            hit_tokens=min(hit * self._block_tokens, request.num_tokens),
            attention_blocks=reach,
            epoch=self._pool.epoch,
            attention_block_ids=tuple(
                tuple(b for b in table[:reach] if b is not None) for table in tables
            ),
            snapshot_ids=tuple(snapshot_ids),
            promotions=tuple(promotions),
        )

    def plan(self, request: CacheRequest, match: PrefixMatch) -> AllocationPlan:
        """Pages `allocate` would take for `request` given `match`; no side effects."""
        num_cacheable = len(request.block_hashes)
        num_tail = -(-request.num_tokens // self._block_tokens) - num_cacheable
        num_new = num_cacheable - match.attention_blocks if self._attention else 0
        boundaries: tuple[int, ...] = ()
        if self._state and request.takes_snapshots:
            boundaries = self._policy.boundaries(
                hit_blocks=match.hit_blocks,
                num_blocks=num_cacheable,
                full_blocks=min(num_cacheable, request.num_tokens // self._block_tokens),
                junction_blocks=match.attention_blocks,
            )
        pages = sum(m.pages_for(num_new + num_tail) for m in self._attention)
        pages += sum(m.pages_for(len(boundaries)) for m in self._state)
        pages += match.num_promoted_pages
        available = self._pool.available_pages(_touching(match))
        return AllocationPlan(num_new, num_tail, boundaries, pages, available)

    # --- mutations -----------------------------------------------------------------------

    def allocate(
        self, request: CacheRequest, match: PrefixMatch | None = None
    ) -> Allocation | OutOfPages:
        """Reference the hit blocks and allocate the uncached part, or change nothing.

        `match` must come from `match(request)`; one older than the last eviction is redone.
        """
        if request.request_id in self._requests:
            raise DuplicateRequestError(f"request {request.request_id} already holds blocks")
        if match is None or match.epoch != self._pool.epoch:
            match = self.match(request)
        else:
            self._validate(request)
        plan = self.plan(request, match)
        new: list[NewBlock] = []
        for attention in self._attention:
            new += attention.new_blocks(plan.num_new_blocks, plan.num_tail_blocks)
        for state in self._state:
            new += state.new_blocks(len(plan.snapshot_boundaries))
        block_ids = self._pool.acquire(_touching(match), new, match.promotions)
        if block_ids is None:
            return OutOfPages(request.request_id, plan.num_pages, plan.num_available_pages)
        held = self._record(request, match, plan, block_ids)
        self._requests[request.request_id] = held
        return self._allocation(held, match, plan.num_pages)

    def commit(self, request_id: RequestId, num_blocks: int | None = None) -> int:
        """Publish the request's first `num_blocks` blocks (default: all its hashed blocks) and
        the snapshots at boundaries up to there. Returns how many blocks became cached; a block
        another request cached first stays private (counted as not new)."""
        held = self._held(request_id)
        hashes = held.request.block_hashes
        upto = len(hashes) if num_blocks is None else min(num_blocks, len(hashes))
        if upto < 0:
            raise InvalidRequestError(f"cannot commit {num_blocks} blocks")
        start = held.committed_blocks
        if upto <= start:
            return 0
        stored = 0
        first_new = max(start, held.reused_blocks)  # blocks before it were cached already
        for attention, table in zip(self._attention, held.tables, strict=True):
            stored += attention.commit(table, hashes, first_new, upto)
        for state, snapshots in zip(self._state, held.snapshots, strict=True):
            for boundary in held.boundaries:
                if start < boundary <= upto:
                    stored += state.commit(snapshots[boundary], hashes[boundary - 1])
        held.committed_blocks = upto
        return stored

    def release(self, request_id: RequestId) -> None:
        """Drop every reference the request holds (transfers keep their own)."""
        held = self._held(request_id)
        del self._requests[request_id]
        for block_id in self._deepest_first(held, first_block=0, with_snapshots=True):
            self._pool.release(block_id)

    def begin_transfer(self, request_id: RequestId, first_block: int = 0) -> TransferManifest:
        """Pin the attention blocks from `first_block` on (the receiver has the rest) and every
        live state until `complete_transfer`, independently of the request's own release."""
        held = self._held(request_id)
        num_blocks = len(held.tables[0]) if held.tables else len(held.request.block_hashes)
        if not 0 <= first_block <= num_blocks:
            raise InvalidRequestError(f"first_block {first_block} outside 0..{num_blocks}")
        pinned = list(self._deepest_first(held, first_block, with_snapshots=False))
        for block_id in pinned:
            self._pool.touch(block_id)
        transfer_id = TransferId(self._next_transfer_id)
        self._next_transfer_id += 1
        self._transfers[transfer_id] = pinned
        attention = tuple(
            AttentionBlocks(
                m.group.index,
                tuple(table[first_block:]),
                min(held.num_tail_blocks, len(table) - first_block),
            )
            for m, table in zip(self._attention, held.tables, strict=True)
        )
        live = tuple((m.group.index, b) for m, b in zip(self._state, held.live, strict=True))
        pages = sum(len(self._pool.info(b).pages) for b in pinned)
        return TransferManifest(transfer_id, request_id, first_block, attention, live, pages)

    def complete_transfer(self, transfer_id: TransferId) -> None:
        pinned = self._transfers.pop(transfer_id, None)
        if pinned is None:
            raise UnknownTransferError(f"transfer {transfer_id} is not pinned")
        for block_id in pinned:
            self._pool.release(block_id)

    # --- internals -----------------------------------------------------------------------

    def _validate(self, request: CacheRequest) -> tuple[BlockHash, ...]:
        num_blocks = -(-request.num_tokens // self._block_tokens)
        if len(request.block_hashes) > num_blocks:
            raise InvalidRequestError(
                f"{request.request_id}: {len(request.block_hashes)} block hashes for "
                f"{request.num_tokens} tokens ({num_blocks} blocks of {self._block_tokens})"
            )
        return request.block_hashes

    def _held(self, request_id: RequestId) -> _Held:
        held = self._requests.get(request_id)
        if held is None:
            raise UnknownRequestError(f"request {request_id} holds no blocks")
        return held

    def _deepest_restorable(self, hashes: tuple[BlockHash, ...], cap: int) -> int:
        """Deepest boundary <= cap with a snapshot in every state group, in any tier (0 always
        qualifies: the empty prefix needs no state)."""
        if not self._state:
            return cap
        for boundary in range(cap, 0, -1):
            if all(state.has_snapshot(hashes[boundary - 1]) for state in self._state):
                return boundary
        return 0

    def _record(
        self,
        request: CacheRequest,
        match: PrefixMatch,
        plan: AllocationPlan,
        acquired: list[BlockId],
    ) -> _Held:
        """Sort freshly acquired ids (in `new_blocks` order, then the promoted units) into the
        request's tables."""
        num_new = plan.num_new_blocks + plan.num_tail_blocks
        num_created = len(acquired) - len(match.promotions)
        new_ids, promoted = acquired[:num_created], acquired[num_created:]
        by_unit = {
            (p.group_index, p.position): b for p, b in zip(match.promotions, promoted, strict=True)
        }
        tables: list[list[BlockId]] = []
        cursor = 0
        for manager, dram_ids in zip(self._attention, match.attention_block_ids, strict=True):
            in_dram = iter(dram_ids)
            index = manager.group.index
            hits = [_pick(by_unit.get((index, k)), in_dram) for k in range(match.attention_blocks)]
            tables.append([*hits, *new_ids[cursor : cursor + num_new]])
            cursor += num_new
        live: list[BlockId] = []
        snapshots: list[dict[int, BlockId]] = []
        restored = iter(match.snapshot_ids)
        for state in self._state:
            live.append(new_ids[cursor])
            by_boundary = dict(zip(plan.snapshot_boundaries, new_ids[cursor + 1 :], strict=False))
            cursor += 1 + len(plan.snapshot_boundaries)
            if match.hit_blocks:
                unit = by_unit.get((state.group.index, match.hit_blocks))
                by_boundary[match.hit_blocks] = _pick(unit, restored)
            snapshots.append(by_boundary)
        return _Held(
            request,
            match.attention_blocks,
            plan.num_tail_blocks,
            plan.snapshot_boundaries,
            tables,
            live,
            snapshots,
            committed_blocks=match.hit_blocks,
        )

    def _allocation(self, held: _Held, match: PrefixMatch, num_pages: int) -> Allocation:
        attention = tuple(
            AttentionBlocks(m.group.index, tuple(table), held.num_tail_blocks)
            for m, table in zip(self._attention, held.tables, strict=True)
        )
        state = tuple(
            StateBlocks(
                m.group.index,
                held.live[i],
                held.snapshots[i][match.hit_blocks] if match.hit_blocks else None,
                tuple((b, held.snapshots[i][b]) for b in held.boundaries),
            )
            for i, m in enumerate(self._state)
        )
        return Allocation(
            held.request.request_id, match, attention, state, num_pages, match.num_promoted_pages
        )

    def _deepest_first(
        self, held: _Held, first_block: int, with_snapshots: bool
    ) -> Iterator[BlockId]:
        """Live states, tail blocks, then boundary by boundary from the end: snapshots at
        boundary b before the attention blocks ending there."""
        yield from held.live
        num_cacheable = len(held.request.block_hashes)
        for table in held.tables:
            yield from reversed(table[max(num_cacheable, first_block) :])
        for boundary in range(num_cacheable, first_block, -1):
            if with_snapshots:
                for snapshots in held.snapshots:
                    snapshot = snapshots.get(boundary)
                    if snapshot is not None:
                        yield snapshot
            for table in held.tables:
                yield table[boundary - 1]


def _pick(promoted: BlockId | None, in_dram: Iterator[BlockId]) -> BlockId:
    """The promoted block of a unit if it was promoted, else the next DRAM-resident one."""
    return promoted if promoted is not None else next(in_dram)


def _touching(match: PrefixMatch) -> list[BlockId]:
    touching = [b for blocks in match.attention_block_ids for b in blocks]
    touching += match.snapshot_ids
    return touching
