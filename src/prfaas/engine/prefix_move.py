"""Moving a cached prefix between two pools (a cross-cluster `CacheMove`, paper section 4).

The holder reads the restorable prefix of a prompt straight out of its pool, as pool units:
the attention blocks [0, k) of every attention group and, of every state group, the snapshot
stored at boundary k (the hybrid hit rule: blocks and the state at exactly that boundary,
never one without the other). The target writes those units into freshly allocated blocks
of its own pool under the same block hashes and commits them, so its next prefill of a
prompt with that prefix restores k blocks exactly as if it had computed them itself.

    holder: export_prefix(paged, prompt)           ->  PrefixExport (k blocks, bytes per group)
    target: import_prefix(paged, export, req_id)   ->  blocks restorable now (k, or 0: no room)

Both pools must have the same cache identity (model fingerprint, block size, hash seed: the
transfer handshake checks it) and so the same page layout; a unit's bytes are copied as they
are, bit for bit. One `PrefixRecord` per group, rows in block order: attention groups k rows
of the group's unit bytes, state groups one row. Only whole blocks move (k * B tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from prfaas.engine.errors import CacheImportError
from prfaas.engine.paged_cache import PagedCache
from prfaas.kvcache import CacheRequest, GroupKind, OutOfPages, RequestId


@dataclass(frozen=True, slots=True)
class PrefixRecord:
    """One group's units: `num_rows` rows of `row_bytes` (attention: one per block)."""

    group_index: int
    is_attention: bool
    num_rows: int
    data: bytes

    @property
    def row_bytes(self) -> int:
        return len(self.data) // max(1, self.num_rows)


@dataclass(frozen=True, slots=True)
class PrefixExport:
    """A restorable prefix: its tokens (exactly `num_blocks` whole blocks) and its units."""

    tokens: tuple[int, ...]
    num_blocks: int
    records: tuple[PrefixRecord, ...]

    @property
    def nbytes(self) -> int:
        return sum(len(r.data) for r in self.records)


def export_prefix(
    paged: PagedCache, prompt: Sequence[int], max_tokens: int | None = None
) -> PrefixExport | None:
    """The longest prefix of `prompt` this pool can restore (at most `max_tokens` tokens;
    rounded down to a boundary with a state snapshot), or None when it holds none."""
    block = paged.block_tokens
    probe = paged.request("prefix-export", prompt, 0, imported=False)
    if max_tokens is not None:
        cap = min(probe.max_hit_blocks or 0, max_tokens // block)
        probe = CacheRequest(probe.request_id, probe.block_hashes, probe.num_tokens, cap)
    match = paged.pool.dram_match(probe)  # what the pages hold now; a disk tier is not read
    k = match.hit_blocks
    if k == 0:
        return None
    storage, pool = paged.storage, paged.pool
    records: list[PrefixRecord] = []
    attention_ids = iter(match.attention_block_ids)
    state_ids = iter(match.snapshot_ids)
    for group in paged.config.layout.groups:
        is_attention = group.kind is GroupKind.ATTENTION
        ids = list(next(attention_ids))[:k] if is_attention else [next(state_ids)]
        rows = storage.gather_units([pool.pages_of(b) for b in ids])
        raw = rows[:, : group.unit_bytes].contiguous().numpy().tobytes()
        records.append(PrefixRecord(group.index, is_attention, len(ids), raw))
    return PrefixExport(tuple(prompt[: k * block]), k, tuple(records))


def import_prefix(paged: PagedCache, export: PrefixExport, request_id: str) -> int:
    """Write `export` into this pool as cached prefix; the blocks now restorable (0 when the
    pool has no room). Blocks it already holds are kept, not overwritten."""
    block = paged.block_tokens
    k = export.num_blocks
    if len(export.tokens) != k * block or k == 0:
        raise CacheImportError(f"a prefix of {len(export.tokens)} tokens is not {k} blocks")
    groups = paged.config.layout.groups
    by_group = {r.group_index: r for r in export.records}
    if sorted(by_group) != [g.index for g in groups]:
        raise CacheImportError("the prefix export does not cover every group of this pool")
    hashes = paged.config.hash_scheme.hash_tokens(list(export.tokens))
    request = CacheRequest(RequestId(request_id), hashes, k * block, max_hit_blocks=k)
    allocation = paged.pool.allocate(request)
    if isinstance(allocation, OutOfPages):
        return 0
    rid = allocation.request_id
    try:
        if allocation.match.hit_blocks >= k:
            return k  # already restorable here
        first = allocation.match.attention_blocks
        attention = iter(allocation.attention)
        snapshots = paged.snapshot_blocks(allocation, k)
        if snapshots is None:
            raise CacheImportError(f"the pool took no snapshot at boundary {k}")
        state = iter(snapshots)
        for group in groups:
            record = by_group[group.index]
            rows = _rows(record, group.unit_bytes)
            if record.is_attention:
                ids = next(attention).block_ids[first:k]
                units = [paged.pool.pages_of(b) for b in ids]
                if units:
                    paged.storage.scatter_units(units, rows[first:k])
            else:
                paged.storage.scatter_units([paged.pool.pages_of(next(state))], rows)
        paged.pool.commit(rid, k)
        return k
    finally:
        paged.pool.release(rid)


def _rows(record: PrefixRecord, unit_bytes: int) -> torch.Tensor:
    """The record's rows as a (rows, unit_bytes) uint8 tensor (the storage pads to pages)."""
    if record.row_bytes != unit_bytes:
        raise CacheImportError(
            f"group {record.group_index}: rows of {record.row_bytes} B, this pool's units "
            f"are {unit_bytes} B"
        )
    flat = torch.frombuffer(bytearray(record.data), dtype=torch.uint8)
    return flat.reshape(record.num_rows, unit_bytes)
