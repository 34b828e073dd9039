"""The engine's pool: `HybridPrefixCache` bookkeeping over `TorchPageStorage` pages.

Every request's cache lives in pool pages. While a request computes, transformers works on its
own cache object; this class keeps the pool in step with it:

    restore   pool -> cache object: the hit's attention blocks and the snapshot taken at
              exactly that boundary (never one without the other: the pool's hit rule)
    write     cache object -> pool: each attention block once it is full, a state snapshot
              when the prefill stands exactly on a snapshot boundary, and at the end of the
              prefill the partial tail block and the live state
    import    exported records -> cache object -> pool (decode side of disaggregation)
    disk      with `EngineConfig.disk_tier`, units the pool evicts are kept as files; a hit
              reserves pages for them in `allocate` and the prefill loads them back layer by
              layer (`layer_load`), each layer installed with `restore_layer` once it is in

Prompt hashing: only blocks that end before the last prompt token get an identity
(`hash_tokens(prompt[:-1])`). The engine needs the last token's logits, so a hit can never
cover the last token, and the request-end snapshot lands on the deepest boundary that an
identical prompt can resume from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from prfaas.engine.cache_io import (
    attention_from_rows,
    attention_rows,
    install_attention,
    install_state,
    state_from_row,
    state_row,
)
from prfaas.engine.cache_layout import CacheLayout, GroupCodec
from prfaas.engine.config import EngineConfig
from prfaas.engine.disk_tier import FileTierStorage
from prfaas.engine.storage import TorchPageStorage
from prfaas.kvcache import (
    Allocation,
    BlockId,
    CacheConfig,
    CacheRequest,
    HybridPrefixCache,
    InstanceId,
    OutOfPages,
    RequestId,
)


class PagedCache:
    """One instance's pool plus the codec between it and transformers' cache objects."""

    def __init__(self, layout: CacheLayout, config: EngineConfig, model_config: Any) -> None:
        self.layout = layout
        self.model_config = model_config
        self.config = CacheConfig.for_model(
            layout.spec,
            block_tokens=config.block_tokens,
            num_pages=config.num_pages,
            capacity_bytes=config.pool_capacity_bytes,
            snapshot_policy=config.snapshot_policy,
            seed=config.hash_seed,
            lower_tier=config.disk_tier.tier_spec() if config.disk_tier else None,
        )
        self.storage = TorchPageStorage(self.config.num_pages, self.config.layout.page_bytes)
        self.disk = FileTierStorage(config.disk_tier.directory) if config.disk_tier else None
        self.pool = HybridPrefixCache(
            self.config, InstanceId(config.instance_id), self.storage, self.disk
        )

    @property
    def block_tokens(self) -> int:
        return self.layout.block_tokens

    def request(
        self, request_id: str, prompt: Sequence[int], reserved_tokens: int, *, imported: bool
    ) -> CacheRequest:
        """A prompt plus `reserved_tokens` of decode room; an import resumes from no state."""
        hashes = self.config.hash_scheme.hash_tokens(list(prompt[:-1]))
        max_hit = 0 if imported else (len(prompt) - 1) // self.block_tokens
        return CacheRequest(
            RequestId(request_id),
            hashes,
            len(prompt) + reserved_tokens,
            max_hit_blocks=max_hit,
            takes_snapshots=not imported,
        )

    def allocate(self, request: CacheRequest) -> Allocation | OutOfPages:
        """Pages for the request; units of its hit on disk stay to be loaded by the prefill
        (`Allocation.pending_loads`, read layer by layer by `layer_load`)."""
        return self.pool.allocate(request, defer_promotions=True)

    # --- pool -> cache object ------------------------------------------------------------

    def restore(self, allocation: Allocation) -> Any:
        """A cache object holding the hit: attention blocks and the state at that boundary."""
        cache = self.layout.new_cache()
        if allocation.match.hit_blocks:
            for layer_index in range(self.layout.num_layers):
                self.restore_layer(cache, allocation, layer_index)
        return cache

    def restore_layer(self, cache: Any, allocation: Allocation, layer_index: int) -> None:
        """Layer `layer_index` of the hit into the cache object, from that layer's bytes of
        each unit only (its other layers may still be on their way from disk)."""
        hit_blocks = allocation.match.hit_blocks
        hit_tokens = hit_blocks * self.block_tokens
        for codec, blocks in zip(self._attention_codecs(), allocation.attention, strict=True):
            slot = codec.slot_of(layer_index)
            if slot is not None:
                units = [self.pool.pages_of(b) for b in blocks.block_ids[:hit_blocks]]
                rows = self.storage.gather_range(units, *codec.slot_range(slot))
                one = codec.layer_codec(slot)
                install_attention(cache, one, attention_from_rows(rows, one, hit_tokens))
        for codec, state in zip(self._state_codecs(), allocation.state, strict=True):
            slot = codec.slot_of(layer_index)
            if slot is not None:
                assert state.restore_from is not None  # a hit always carries its state
                units = [self.pool.pages_of(state.restore_from)]
                row = self.storage.gather_range(units, *codec.slot_range(slot))
                one = codec.layer_codec(slot)
                install_state(cache, one, state_from_row(row, one, hit_tokens), hit_tokens)

    def restore_attention(self, cache: Any, allocation: Allocation, num_blocks: int) -> None:
        for codec, blocks in zip(self._attention_codecs(), allocation.attention, strict=True):
            units = [self.pool.pages_of(b) for b in blocks.block_ids[:num_blocks]]
            rows = self.storage.gather_units(units)
            tensors = attention_from_rows(rows, codec, num_blocks * self.block_tokens)
            install_attention(cache, codec, tensors)

    # --- cache object -> pool ------------------------------------------------------------

    def write_attention(
        self,
        cache: Any,
        allocation: Allocation,
        token_start: int,
        token_end: int,
        *,
        row: int = 0,
        seq_offset: int = 0,
    ) -> None:
        """Write the blocks covering tokens [token_start, token_end) (block aligned start).
        Blocks the request found cached are shared and already hold these bytes: skipped."""
        first = max(token_start // self.block_tokens, allocation.match.attention_blocks)
        start = first * self.block_tokens
        if start >= token_end:
            return
        last = -(-token_end // self.block_tokens)
        for codec, blocks in zip(self._attention_codecs(), allocation.attention, strict=True):
            rows = attention_rows(
                cache,
                codec,
                start + seq_offset,
                token_end + seq_offset,
                block_tokens=self.block_tokens,
                row=row,
            )
            units = [self.pool.pages_of(b) for b in blocks.block_ids[first:last]]
            self.storage.scatter_units(units, rows)

    def write_states(self, cache: Any, block_ids: Sequence[BlockId]) -> None:
        """The live state of every state group into one block per group (snapshot or live)."""
        for codec, block_id in zip(self._state_codecs(), block_ids, strict=True):
            self.storage.scatter_units([self.pool.pages_of(block_id)], state_row(cache, codec))

    def snapshot_blocks(self, allocation: Allocation, boundary: int) -> list[BlockId] | None:
        """Per state group, the snapshot block to fill at `boundary`, if the policy took one
        (a model without state groups: always, none)."""
        found = [dict(s.snapshots).get(boundary) for s in allocation.state]
        if any(b is None for b in found):
            return None
        return [b for b in found if b is not None]

    def live_blocks(self, allocation: Allocation) -> list[BlockId]:
        return [s.live_block_id for s in allocation.state]

    def read_state(self, block_id: BlockId) -> torch.Tensor:
        return self.storage.gather_units([self.pool.pages_of(block_id)])

    def _attention_codecs(self) -> list[GroupCodec]:
        return self.layout.attention_groups

    def _state_codecs(self) -> list[GroupCodec]:
        return self.layout.state_groups
