"""Values that cross the pool's boundary: requests, matches, allocations, transfers, stats.

All are frozen: a caller holding an `Allocation` cannot corrupt the pool's bookkeeping, and a
`PrefixMatch` can be handed from the router to the instance unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from prfaas.kvcache.errors import InvalidRequestError
from prfaas.kvcache.ids import BlockHash, BlockId, PageId, RequestId, TransferId
from prfaas.kvcache.tiers import Promoted


class BlockKind(StrEnum):
    """The paper's two kinds of blocks (section 3).

    PREFIX: a full attention block or a snapshot at a block boundary; hashed at commit, then
    shareable and evictable (LRU among unreferenced). TRANSFER: the uncached tail of a prompt
    (a partial block, any length) and the live state at the exact prompt length; private, never
    hashed, freed when the request and every transfer pinning it have let go.
    """

    PREFIX = "prefix"
    TRANSFER = "transfer"


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """A read-only view of one live block."""

    block_id: BlockId
    group_index: int
    kind: BlockKind
    pages: tuple[PageId, ...]
    ref_count: int
    block_hash: BlockHash | None

    @property
    def is_cached(self) -> bool:
        return self.block_hash is not None


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """A prompt as the pool sees it: the chained hashes of its identifiable blocks and its length.

    `block_hashes` may stop short of the prompt: blocks beyond them are private tail blocks.
    `max_hit_blocks` caps the reusable prefix; an engine that needs the last token's logits
    sets it to (num_tokens - 1) // block_tokens, since a state cannot be rewound by one token.
    `takes_snapshots=False` allocates no snapshot blocks: a decode instance that imports a
    request's final state (and never sees the states at earlier boundaries) must not publish
    snapshots it cannot fill. Its new attention blocks are still cached.
    """

    request_id: RequestId
    block_hashes: tuple[BlockHash, ...]
    num_tokens: int
    max_hit_blocks: int | None = None
    takes_snapshots: bool = True

    def __post_init__(self) -> None:
        if self.num_tokens < 1:
            raise InvalidRequestError(f"{self.request_id}: a request needs at least one token")
        if self.max_hit_blocks is not None and self.max_hit_blocks < 0:
            raise InvalidRequestError(f"{self.request_id}: max_hit_blocks must be >= 0")


@dataclass(frozen=True, slots=True)
class Promotion:
    """One unit of a hit held below DRAM: `allocate` moves it into `num_pages` fresh pages.
    `position` is the attention block's index, or the snapshot's boundary for a state group."""

    group_index: int
    position: int
    block_hash: BlockHash
    num_pages: int
    is_snapshot: bool = False

    @property
    def hit_block(self) -> int:
        """The hit's block this unit belongs to (a snapshot: the block ending at its boundary);
        a hit capped below it needs no promotion of this unit."""
        return self.position - 1 if self.is_snapshot else self.position


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """The longest prefix every group can restore (attention blocks *and* a snapshot at exactly
    `hit_blocks` in every state group). Never a hit without the state
    (restoring attention KV without the recurrent state gives wrong output).

    `attention_blocks` >= `hit_blocks` is how far the attention KV alone reaches: the junction
    where this prompt leaves what is cached. `attention_block_ids` holds, per attention group,
    those `attention_blocks` cached blocks. `epoch` lets `allocate` detect a stale match.

    With a lower tier, units of the match held there are listed in `promotions` instead: the
    block ids above then name only the DRAM-resident units (in position order), and
    `allocate` promotes the rest before the engine sees the allocation.
    """

    hit_blocks: int
    hit_tokens: int
    attention_blocks: int
    epoch: int
    attention_block_ids: tuple[tuple[BlockId, ...], ...]
    snapshot_ids: tuple[BlockId, ...]
    promotions: tuple[Promotion, ...] = ()

    @property
    def num_promoted_pages(self) -> int:
        return sum(p.num_pages for p in self.promotions)

    @property
    def is_hit(self) -> bool:
        return self.hit_blocks > 0


@dataclass(frozen=True, slots=True)
class AllocationPlan:
    """What `allocate` would take, computed without side effects. `num_new_blocks` counts the
    full blocks each attention group must allocate (past the match's `attention_blocks`)."""

    num_new_blocks: int
    num_tail_blocks: int
    snapshot_boundaries: tuple[int, ...]
    num_pages: int
    num_available_pages: int

    @property
    def fits(self) -> bool:
        return self.num_pages <= self.num_available_pages


@dataclass(frozen=True, slots=True)
class OutOfPages:
    """`allocate`'s answer when even evicting every unreferenced cached block is not enough."""

    request_id: RequestId
    num_pages_needed: int
    num_pages_available: int


@dataclass(frozen=True, slots=True)
class AttentionBlocks:
    """One attention group's block table for a prompt: the match's `attention_blocks` cached
    blocks first (shared and read-only; those past `hit_blocks` are recomputed only to rebuild
    the state groups, their KV is already there), then new full blocks, then private tails."""

    group_index: int
    block_ids: tuple[BlockId, ...]
    num_tail_blocks: int


@dataclass(frozen=True, slots=True)
class StateBlocks:
    """One state group's blocks for a request. The engine copies `restore_from` (the hit
    snapshot) into `live_block_id`, runs the prompt in it, and copies it into each snapshot
    block when the prompt reaches that boundary (boundary * block_tokens tokens)."""

    group_index: int
    live_block_id: BlockId
    restore_from: BlockId | None
    snapshots: tuple[tuple[int, BlockId], ...]


@dataclass(frozen=True, slots=True)
class Allocation:
    request_id: RequestId
    match: PrefixMatch
    attention: tuple[AttentionBlocks, ...]
    state: tuple[StateBlocks, ...]
    num_new_pages: int  # promoted pages included
    num_promoted_pages: int = 0  # pages loaded back from a lower tier for this hit
    #: Promotions whose bytes the caller owes (`allocate(..., defer_promotions=True)`): the
    #: pages are reserved and the events sent, the bytes are still in the lower tier.
    pending_loads: tuple[Promoted, ...] = ()


@dataclass(frozen=True, slots=True)
class TransferManifest:
    """The blocks pinned for shipping: attention blocks from `first_block` on (what the receiver
    lacks: hybrid P/D ships the last state and only the uncached blocks) plus every state
    group's live state. Freed on `complete_transfer`."""

    transfer_id: TransferId
    request_id: RequestId
    first_block: int
    attention: tuple[AttentionBlocks, ...]
    live_states: tuple[tuple[int, BlockId], ...]
    num_pages: int


@dataclass(frozen=True, slots=True)
class PoolStats:
    num_pages: int
    num_free_pages: int
    num_evictable_pages: int
    num_cached_blocks: int
    num_live_blocks: int
    num_requests: int
    num_transfers: int
    num_lower_pages: int = 0  # pages' worth of units held in the lower tier

    @property
    def num_used_pages(self) -> int:
        return self.num_pages - self.num_free_pages
