"""One decode batch: requests' caches stacked into one transformers cache object.

Requests of different lengths share a forward pass the way transformers' own batched
generation does it, by left padding: each request's attention KV is padded on the left to the
longest one, a 2-D attention mask hides the pads, and position ids carry each request's true
position. Sliding windows are padded to the window the longest request keeps; linear-attention
states need no padding (they have no sequence axis).

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

from prfaas.engine.cache_io import new_cache
from prfaas.engine.cache_layout import CacheLayout, LayerKind


class DecodeBatch:
    """A stacked cache of several requests plus their true lengths (tokens in the cache)."""

    def __init__(self, cache: Any, lengths: list[int], layout: CacheLayout) -> None:
        self.cache = cache
        self.lengths = lengths
        self._layout = layout

    @classmethod
    def stack(
        cls, caches: Sequence[Any], lengths: Sequence[int], layout: CacheLayout, model_config: Any
    ) -> DecodeBatch:
        if len(caches) == 1:
            return cls(caches[0], list(lengths), layout)
        longest = max(lengths)
        batched = new_cache(model_config)
        for index, kind in enumerate(layout.layer_kinds):
            layers = [c.layers[index] for c in caches]
            target = batched.layers[index]
            if kind is LayerKind.LINEAR:
                conv = torch.cat([layer.conv_states[0] for layer in layers])
                recurrent = torch.cat([layer.recurrent_states[0] for layer in layers])
                target.lazy_initialization(
                    conv_states=conv,
                    recurrent_states=recurrent,
                    conv_kernel_size=layers[0].conv_kernel_size[0],
                )
                target.conv_states[0].copy_(conv)
                target.recurrent_states[0].copy_(recurrent)
                target.has_previous_state[0] = True
                continue
            width = longest
            if kind is LayerKind.SLIDING:
                width = min(longest, layers[0].sliding_window - 1)
            keys = torch.cat([_left_pad(layer.keys, width) for layer in layers])
            values = torch.cat([_left_pad(layer.values, width) for layer in layers])
            target.lazy_initialization(keys, values)
            target.keys, target.values = keys, values
            if kind is LayerKind.SLIDING:
                target.cumulative_length = longest
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

    def split(self, model_config: Any) -> list[Any]:
        """Per-request caches (batch 1, pads removed), e.g. before the membership changes."""
        if self.size == 1:
            return [self.cache]
        return [self._row(row, model_config) for row in range(self.size)]

    def _row(self, row: int, model_config: Any) -> Any:
        single = new_cache(model_config)
        length = self.lengths[row]
        for index, kind in enumerate(self._layout.layer_kinds):
            source, target = self.cache.layers[index], single.layers[index]
            if kind is LayerKind.LINEAR:
                conv = source.conv_states[0][row : row + 1].clone()
                recurrent = source.recurrent_states[0][row : row + 1].clone()
                target.lazy_initialization(
                    conv_states=conv,
                    recurrent_states=recurrent,
                    conv_kernel_size=source.conv_kernel_size[0],
                )
                target.conv_states[0].copy_(conv)
                target.recurrent_states[0].copy_(recurrent)
                target.has_previous_state[0] = True
                continue
            kept = length
            if kind is LayerKind.SLIDING:
                kept = min(length, source.sliding_window - 1)
            keys = source.keys[row : row + 1, :, source.keys.shape[2] - kept :].clone()
            values = source.values[row : row + 1, :, source.values.shape[2] - kept :].clone()
            target.lazy_initialization(keys, values)
            target.keys, target.values = keys, values
            if kind is LayerKind.SLIDING:
                target.cumulative_length = length
        return single


def _left_pad(tensor: torch.Tensor, width: int) -> torch.Tensor:
    return F.pad(tensor, (0, 0, width - tensor.shape[2], 0))
