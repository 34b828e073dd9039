"""Prefill over the uncached suffix, chunked, and the decode side's import of an export.

Chunks end at multiples of `chunk_tokens` from the hit and at every snapshot boundary the
pool's policy chose, because a state can only be copied where the prefill stands:

    prompt of 70 tokens, B = 16, hit = 1 block, chunk = 32, snapshot at boundary 4 (64)
    [0 ── hit ── 16) restored │ 16 ──────── 48 │ 48 ── 64 │ 64 ── 70 │
                                 chunk 1          chunk 2    last chunk: export hooks fire

After each chunk the full blocks it completed go to the pool; after the last, the partial tail
and the live states, then the pool commits (full blocks and snapshots become prefix cache).

Some models' multi-token forward cannot start from a cached state (transformers' torch paths of
Mamba-1 and MiniMax lightning attention treat every multi-token forward as a fresh prefill):
`CacheLayout.resumes_chunks` is False for them. Their prefill runs from token 0 to the first
snapshot boundary in one forward, and everything after a state (later chunks, the suffix after
a prefix hit) one token at a time, which is exact (it is the decode path).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from prfaas.engine.cache_io import install_attention, install_state
from prfaas.engine.cache_layout import LayerKind
from prfaas.engine.errors import CacheImportError
from prfaas.engine.export import ExportCallback, ExportedPrefill, LayerExportHooks, record_tensors
from prfaas.engine.layer_load import LayerLoading
from prfaas.engine.paged_cache import PagedCache
from prfaas.kvcache import Allocation


@dataclass(frozen=True, slots=True)
class PrefillRun:
    """A finished prefill: the request's cache object and its last-token logits."""

    cache: Any
    last_logits: torch.Tensor
    hit_tokens: int


def chunk_ends(
    start: int, num_tokens: int, chunk_tokens: int, boundaries: Sequence[int]
) -> list[int]:
    """Where each chunk ends: every `chunk_tokens` from `start`, and at each boundary."""
    ends = set(range(start + chunk_tokens, num_tokens, chunk_tokens))
    ends.update(b for b in boundaries if start < b < num_tokens)
    ends.add(num_tokens)
    return sorted(ends)


def forward(model: Any, tokens: Sequence[int], start: int, cache: Any) -> torch.Tensor:
    """One batch-1 forward of `tokens` at positions start.. ; returns the last logits."""
    ids = torch.tensor([list(tokens)], dtype=torch.long)
    positions = torch.arange(start, start + len(tokens), dtype=torch.long).unsqueeze(0)
    with torch.no_grad():
        out = model(
            input_ids=ids, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1
        )
    logits: torch.Tensor = out.logits[0, -1]
    return logits


def run_prefill(
    model: Any,
    paged: PagedCache,
    allocation: Allocation,
    prompt: Sequence[int],
    *,
    chunk_tokens: int,
    on_layer: ExportCallback | None = None,
    export_from_token: int = 0,
) -> PrefillRun:
    """Restore the hit (its units on disk loaded layer by layer as the first forward
    reaches each layer), run the rest of the prompt in chunks, keep the pool in step."""
    cache = paged.restore(allocation)
    loading = LayerLoading.start(model, paged, allocation, cache)
    try:
        return _run_chunks(
            model,
            paged,
            allocation,
            prompt,
            cache,
            chunk_tokens=chunk_tokens,
            on_layer=on_layer,
            export_from_token=export_from_token,
        )
    finally:
        if loading is not None:
            loading.close()


def _run_chunks(
    model: Any,
    paged: PagedCache,
    allocation: Allocation,
    prompt: Sequence[int],
    cache: Any,
    *,
    chunk_tokens: int,
    on_layer: ExportCallback | None,
    export_from_token: int,
) -> PrefillRun:
    block = paged.block_tokens
    hit = allocation.match.hit_tokens
    boundaries = [b * block for b, _ in allocation.state[0].snapshots] if allocation.state else []
    n = len(prompt)
    position = hit
    logits = torch.empty(0)
    resumes = paged.layout.resumes_chunks
    for end in chunk_ends(hit, n, chunk_tokens if resumes else n, boundaries):
        # A model whose multi-token forward cannot start from a cached state (see
        # `CacheLayout.resumes_chunks`) continues one token at a time, as decode does.
        pieces = [(position, end)]
        if position > 0 and not resumes:
            pieces = [(p, p + 1) for p in range(position, end)]
        for start, stop in pieces:
            hooks = None
            if stop == n and on_layer is not None:
                hooks = LayerExportHooks(
                    model,
                    paged.layout,
                    cache,
                    token_start=export_from_token,
                    num_tokens=n,
                    callback=on_layer,
                )
            try:
                logits = forward(model, prompt[start:stop], start, cache)
            finally:
                if hooks is not None:
                    hooks.remove()
        written_end = end if end == n else end // block * block
        paged.write_attention(cache, allocation, position // block * block, written_end)
        snapshot = paged.snapshot_blocks(allocation, end // block) if end % block == 0 else None
        if snapshot is not None:
            paged.write_states(cache, snapshot)
        position = end
    paged.write_states(cache, paged.live_blocks(allocation))
    paged.pool.commit(allocation.request_id)
    return PrefillRun(cache, logits, hit)


def import_export(paged: PagedCache, allocation: Allocation, exported: ExportedPrefill) -> Any:
    """Build the request's cache object from the receiver's own attention prefix plus the
    exported tail and final states, write it into the receiver's pool, and commit."""
    layout = paged.layout
    n = len(exported.prompt_tokens)
    have = allocation.match.attention_blocks * paged.block_tokens
    by_slice = {(r.layer_index, r.group_index): r for r in exported.records}
    cache = layout.new_cache()
    if have:
        paged.restore_attention(cache, allocation, allocation.match.attention_blocks)
    for codec in layout.groups:
        tensors = []
        for slot in codec.slots:
            record = by_slice.get((slot.layer_index, codec.group.index))
            if record is None or record.token_end != n:
                raise CacheImportError(
                    f"no export of layer {slot.layer_index} ({codec.group.name}) up to {n} tokens"
                )
            parts = record_tensors(record, codec)
            if codec.kind is LayerKind.FULL:
                parts = _join(
                    cache, slot.layer_index, (parts[0], parts[1]), record.token_start, have
                )
            tensors.append(parts)
        if codec.kind is LayerKind.FULL:
            install_attention(cache, codec, tensors)
        else:
            install_state(cache, codec, tensors, n)
    paged.write_attention(cache, allocation, have // paged.block_tokens * paged.block_tokens, n)
    paged.write_states(cache, paged.live_blocks(allocation))
    paged.pool.commit(allocation.request_id)
    return cache


def _join(
    cache: Any, layer_index: int, pair: tuple[torch.Tensor, torch.Tensor], start: int, have: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The receiver's cached tokens [0, have) followed by the export's tokens from `have`."""
    if start > have:
        raise CacheImportError(
            f"layer {layer_index}: export starts at {start}, receiver has {have}"
        )
    keys, values = pair[0][:, :, have - start :], pair[1][:, :, have - start :]
    if have == 0:
        return keys, values
    layer = cache.layers[layer_index]
    return torch.cat([layer.keys, keys], dim=2), torch.cat([layer.values, values], dim=2)
