"""One decode batch: requests' caches stacked into one transformers cache object.

Requests of different lengths share a forward pass the way transformers' own batched
generation does it, by left padding: each request's attention KV is padded on the left to the
longest one, a 2-D attention mask hides the pads, and position ids carry each request's true
position. Sliding windows are padded to the window the longest request keeps; states (conv,
SSM, linear attention, lightning) need no padding (they have no sequence axis).

    request lengths 5, 3    keys of a full-attention layer     mask
                            [k k k k k]                         1 1 1 1 1 (+1 for the new token)
                            [0 0 k k k]                         0 0 1 1 1

The batch persists while its members stay the same, so decode appends in place as
transformers does. A request joins or leaves between steps: the engine splits the batch back
into per-request caches (`split`) and stacks the new membership (`DecodeBatch.stack`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from prfaas.engine.cache_io import install_attention, install_state, read_states
from prfaas.engine.cache_layout import CacheLayout, LayerKind


class DecodeBatch:
    """A stacked cache of several requests plus their true lengths (tokens in the cache)."""

    def __init__(self, cache: Any, lengths: list[int], layout: CacheLayout) -> None:
        self.cache = cache
        self.lengths = lengths
        self._layout = layout

    @classmethod
    def stack(
        cls, caches: Sequence[Any], lengths: Sequence[int], layout: CacheLayout
    ) -> DecodeBatch:
        if len(caches) == 1:
            return cls(caches[0], list(lengths), layout)
        longest = max(lengths)
        batched = layout.new_cache()
        for codec in layout.groups:
            tensors = []
            for slot in codec.slots:
                if codec.kind is LayerKind.LINEAR:
                    per_request = [read_states(c, slot) for c in caches]
                    tensors.append(
                        tuple(torch.cat(parts) for parts in zip(*per_request, strict=True))
                    )
                    continue
                layers = [c.layers[slot.layer_index] for c in caches]
                width = longest
                if codec.kind is LayerKind.SLIDING:
                    width = min(longest, codec.window_tokens - 1)
                keys = torch.cat([_left_pad(layer.keys, width) for layer in layers])
                values = torch.cat([_left_pad(layer.values, width) for layer in layers])
                tensors.append((keys, values))
            if codec.kind is LayerKind.FULL:
                install_attention(batched, codec, tensors)
            else:
                install_state(batched, codec, tensors, longest)
        return cls(batched, list(lengths), layout)

    @property
    def size(self) -> int:
        return len(self.lengths)

    def padding(self, row: int) -> int:
        """Left pads before row `row`'s first token in full-attention layers."""
        return max(self.lengths) - self.lengths[row]

    def inputs(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(attention mask or None when nothing is padded, position ids) for the next step."""
        longest = max(self.lengths)
        positions = torch.tensor(self.lengths, dtype=torch.long).unsqueeze(1)
        if all(length == longest for length in self.lengths):
            return None, positions
        mask = torch.ones((self.size, longest + 1), dtype=torch.long)
        for row, length in enumerate(self.lengths):
            mask[row, : longest - length] = 0
        return mask, positions

    def advance(self) -> None:
        self.lengths = [length + 1 for length in self.lengths]

    def split(self) -> list[Any]:
        """Per-request caches (batch 1, pads removed), e.g. before the membership changes."""
        if self.size == 1:
            return [self.cache]
        return [self._row(row) for row in range(self.size)]

    def _row(self, row: int) -> Any:
        single = self._layout.new_cache()
        length = self.lengths[row]
        for codec in self._layout.groups:
            tensors = []
            for slot in codec.slots:
                if codec.kind is LayerKind.LINEAR:
                    parts = read_states(self.cache, slot)
                    tensors.append(tuple(p[row : row + 1].clone() for p in parts))
                    continue
                layer = self.cache.layers[slot.layer_index]
                keys, values = layer.keys[row : row + 1], layer.values[row : row + 1]
                kept = length
                if codec.kind is LayerKind.SLIDING:
                    kept = min(length, codec.window_tokens - 1)
                tensors.append(
                    (
                        keys[:, :, keys.shape[2] - kept :].clone(),
                        values[:, :, values.shape[2] - kept :].clone(),
                    )
                )
            if codec.kind is LayerKind.FULL:
                install_attention(single, codec, tensors)
            else:
                install_state(single, codec, tensors, length)
        return single


def _left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(tensor, (0, 0, width - tensor.shape[2], 0))


_PROBE_LENGTHS = (6, 3)


def pads_unequal_lengths(model: Any, layout: CacheLayout) -> bool:
    """Whether one decode step of a left-padded batch (lengths 6 and 3) gives each request the
    logits it gets alone. transformers sizes a model's attention mask from its cache's layer 0;
    where that layer keeps no sequence (MiniMax with a lightning layer first) the padded
    positions are not masked, and the engine then batches only requests of equal length."""
    caches = []
    with torch.no_grad():
        for length in _PROBE_LENGTHS:
            cache = layout.new_cache()
            model(torch.arange(3, 3 + length).unsqueeze(0), cache=cache, use_cache=True)
            caches.append(cache)
        batch = DecodeBatch.stack(caches, _PROBE_LENGTHS, layout)
        mask, positions = batch.inputs()
        step = torch.full((len(caches), 1), 7, dtype=torch.long)
        batched = model(
            input_ids=step,
            attention_mask=mask,
            position_ids=positions,
            cache=batch.cache,
            use_cache=True,
        ).logits[:, -1]
        for row, (cache, length) in enumerate(zip(caches, _PROBE_LENGTHS, strict=True)):
            alone = model(
                input_ids=step[row : row + 1],
                position_ids=torch.tensor([[length]]),
                cache=cache,
                use_cache=True,
            ).logits[0, -1]
            scale = float(alone.abs().max())
            if not torch.allclose(batched[row], alone, rtol=1e-3, atol=1e-3 * scale):
                return False
    return True
