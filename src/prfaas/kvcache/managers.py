"""One manager per group kind: what "cached" and "restorable" mean for that kind.

- `AttentionGroupManager`: block-level KV. A prefix of k blocks is restorable when all k chained
  hashes are cached in the group (partial prefix match: any k works).
- `StateGroupManager`: request-level snapshots. A prefix of k blocks is restorable only when a
  snapshot was stored under exactly the k-th chained hash; nothing shorter or longer helps.

Managers own no pages; they translate their group's rules into `BlockPool` calls. The
coordinator combines them so that a hit needs every group (see `coordinator`).
"""

from __future__ import annotations

from collections.abc import Sequence

from prfaas.kvcache.block_pool import BlockPool, NewBlock
from prfaas.kvcache.ids import BlockHash, BlockId
from prfaas.kvcache.layout import GroupSpec
from prfaas.kvcache.values import BlockKind


class AttentionGroupManager:
    def __init__(self, group: GroupSpec, pool: BlockPool) -> None:
        self.group = group
        self._pool = pool

    def cached_prefix(self, block_hashes: Sequence[BlockHash], limit: int) -> list[BlockId | None]:
        """Blocks of the longest prefix of `block_hashes[:limit]` cached in some tier: the DRAM
        block, or None where the lower tier holds it (a unit to promote)."""
        cached = self._pool.cached_blocks(self.group.index)
        found: list[BlockId | None] = []
        for block_hash in block_hashes[:limit]:
            block_id = cached.get(block_hash)
            if block_id is None and not self._pool.lower_holds(self.group.index, block_hash):
                break
            found.append(block_id)
        return found

    def new_blocks(self, num_prefix: int, num_tail: int) -> list[NewBlock]:
        """Full blocks to compute and cache, then private tail blocks."""
        pages = self.group.pages_per_unit
        index = self.group.index
        prefix = [NewBlock(index, pages, BlockKind.PREFIX)] * num_prefix
        return prefix + [NewBlock(index, pages, BlockKind.TRANSFER)] * num_tail

    def pages_for(self, num_blocks: int) -> int:
        return num_blocks * self.group.pages_per_unit

    def commit(
        self, block_ids: Sequence[BlockId], block_hashes: Sequence[BlockHash], start: int, stop: int
    ) -> int:
        """Cache positions [start, stop) of a block table; returns how many were new."""
        stored = 0
        for position in range(start, stop):
            stored += self._pool.cache(block_ids[position], block_hashes[position])
        return stored


class StateGroupManager:
    def __init__(self, group: GroupSpec, pool: BlockPool) -> None:
        self.group = group
        self._pool = pool

    def snapshot_at(self, block_hash: BlockHash) -> BlockId | None:
        """The snapshot taken exactly at the boundary named by `block_hash`, if in DRAM."""
        return self._pool.cached_blocks(self.group.index).get(block_hash)

    def has_snapshot(self, block_hash: BlockHash) -> bool:
        """Whether some tier holds the snapshot at the boundary named by `block_hash`."""
        return self.snapshot_at(block_hash) is not None or self._pool.lower_holds(
            self.group.index, block_hash
        )

    def new_blocks(self, num_snapshots: int) -> list[NewBlock]:
        """The live state (private, shipped on transfer), then one block per snapshot."""
        pages = self.group.pages_per_unit
        index = self.group.index
        live = NewBlock(index, pages, BlockKind.TRANSFER)
        return [live] + [NewBlock(index, pages, BlockKind.PREFIX)] * num_snapshots

    def pages_for(self, num_snapshots: int) -> int:
        return (1 + num_snapshots) * self.group.pages_per_unit

    def commit(self, block_id: BlockId, block_hash: BlockHash) -> bool:
        return self._pool.cache(block_id, block_hash)
