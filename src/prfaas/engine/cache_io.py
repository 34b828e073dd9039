"""Moving one request's cache between transformers' cache object and pool units.

Rows are units as flat bytes (`GroupCodec` says where each layer's parts sit); the pool's
`TorchPageStorage` gathers and scatters them. Writing goes cache -> rows, restoring goes
rows -> tensors -> a fresh cache object that the model resumes from. Every part is read and
installed through `read_part` / `install_state`, whatever layer class holds it (`Source`).
Everything here works on batch size 1 (one request) unless a `row` is named; `batching`
stacks requests for a decode step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.cache_layout import GroupCodec, LayerKind, LayerSlot, Part, Source, cache_layer

#: Per layer of a group: its parts' tensors in unit form, batch dimension first.
LayerTensors = tuple[torch.Tensor, ...]


def _to_bytes(tensor: torch.Tensor, num_rows: int) -> torch.Tensor:
    return tensor.contiguous().view(torch.uint8).reshape(num_rows, -1)


def _from_bytes(rows: torch.Tensor, part: Part) -> torch.Tensor:
    raw = rows[:, part.offset_bytes : part.offset_bytes + part.nbytes].contiguous()
    return raw.view(part.dtype).reshape(rows.shape[0], *part.shape)


def read_part(cache: Any, layer_index: int, part: Part) -> torch.Tensor:
    """A state part as the unit holds it (batch first): the conv without its oldest column,
    a recurrent or lightning state as is. Attention parts: the layer's keys or values."""
    if part.source is Source.LIGHTNING:
        state: torch.Tensor = cache.linear_cache[layer_index]
        return state
    layer = cache.layers[layer_index]
    if part.source is Source.CONV:
        conv: torch.Tensor = layer.conv_states[part.state_index]
        return conv[..., 1:]
    if part.source is Source.RECURRENT:
        recurrent: torch.Tensor = layer.recurrent_states[part.state_index]
        return recurrent
    tensor: torch.Tensor = layer.keys if part.source is Source.KEYS else layer.values
    return tensor


def read_states(cache: Any, slot: LayerSlot) -> LayerTensors:
    """A linear layer's parts in unit form (batch first)."""
    return tuple(read_part(cache, slot.layer_index, part) for part in slot.parts)


def attention_rows(
    cache: Any,
    codec: GroupCodec,
    token_start: int,
    token_end: int,
    *,
    block_tokens: int,
    row: int = 0,
) -> torch.Tensor:
    """Blocks covering sequence positions [token_start, token_end) of batch row `row` as
    rows of bytes (start on a block boundary); a partial last block is zero-padded."""
    num_blocks = -(-(token_end - token_start) // block_tokens)
    padded = num_blocks * block_tokens
    pieces = []
    for slot in codec.slots:
        layer = cache.layers[slot.layer_index]
        for tensor in (layer.keys, layer.values):
            span = tensor[row, :, token_start:token_end, :]
            if span.shape[1] < padded:
                span = F.pad(span, (0, 0, 0, padded - span.shape[1]))
            heads, _, dim = span.shape
            blocks = span.reshape(heads, num_blocks, block_tokens, dim).permute(1, 0, 2, 3)
            pieces.append(_to_bytes(blocks, num_blocks))
    return torch.cat(pieces, dim=1)


def attention_from_rows(
    rows: torch.Tensor, codec: GroupCodec, num_tokens: int
) -> list[LayerTensors]:
    """Per layer, keys and values of the first `num_tokens` tokens of consecutive blocks."""
    out: list[LayerTensors] = []
    for slot in codec.slots:
        pair = []
        for part in slot.parts:
            blocks = _from_bytes(rows, part)  # (n, H, B, D)
            heads, dim = part.shape[0], part.shape[2]
            seq = blocks.permute(1, 0, 2, 3).reshape(heads, -1, dim)[:, :num_tokens]
            pair.append(seq.unsqueeze(0).contiguous())
        out.append(tuple(pair))
    return out


def sliding_window(tensor: torch.Tensor, window_tokens: int) -> torch.Tensor:
    """The last W - 1 tokens (axis -2) of a sliding layer's keys or values (what transformers
    keeps)."""
    return tensor[..., -(window_tokens - 1) :, :]


def state_row(cache: Any, codec: GroupCodec) -> torch.Tensor:
    """The group's live state (all its layers) as one row."""
    pieces = []
    for slot in codec.slots:
        for part in slot.parts:
            tensor = read_part(cache, slot.layer_index, part)
            if codec.kind is LayerKind.SLIDING:
                window = sliding_window(tensor, codec.window_tokens)
                tensor = F.pad(window, (0, 0, 0, part.shape[1] - window.shape[2]))
            pieces.append(_to_bytes(tensor, 1))
    return torch.cat(pieces, dim=1)


def state_from_row(row: torch.Tensor, codec: GroupCodec, num_tokens: int) -> list[LayerTensors]:
    """Per layer, its state parts in unit form, or the sliding window's (keys, values) of the
    last min(num_tokens, W - 1) tokens."""
    out: list[LayerTensors] = []
    kept = min(num_tokens, codec.window_tokens - 1)
    for slot in codec.slots:
        parts = tuple(_from_bytes(row, part) for part in slot.parts)
        if codec.kind is LayerKind.SLIDING:
            parts = tuple(p[:, :, :kept].contiguous() for p in parts)
        out.append(parts)
    return out


def install_attention(cache: Any, codec: GroupCodec, tensors: list[LayerTensors]) -> None:
    for slot, (keys, values) in zip(codec.slots, tensors, strict=True):
        layer = cache_layer(cache, slot.layer_index)
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values


def install_state(
    cache: Any, codec: GroupCodec, tensors: list[LayerTensors], num_tokens: int
) -> None:
    """Put a state (unit form) into the cache as if the model had just run `num_tokens`
    tokens: sliding windows as keys and values, linear parts into their state slots."""
    for slot, parts in zip(codec.slots, tensors, strict=True):
        if codec.kind is LayerKind.SLIDING:
            layer = cache_layer(cache, slot.layer_index)
            layer.lazy_initialization(parts[0], parts[1])
            layer.keys, layer.values = parts[0], parts[1]
            layer.cumulative_length = num_tokens
            continue
        for part, tensor in zip(slot.parts, parts, strict=True):
            _install_part(cache, slot.layer_index, part, tensor)


def _install_part(cache: Any, layer_index: int, part: Part, tensor: torch.Tensor) -> None:
    if part.source is Source.LIGHTNING:
        cache.set_linear_cache(layer_index, tensor.clone())
        return
    layer = cache_layer(cache, layer_index)
    index = part.state_index
    if part.source is Source.CONV:
        full = F.pad(tensor, (1, 0))  # the never-read oldest column
        layer.lazy_initialization(
            conv_states=full, state_idx=index, conv_kernel_size=full.shape[-1]
        )
        layer.conv_states[index].copy_(full)
    else:
        layer.lazy_initialization(recurrent_states=tensor, state_idx=index)
        layer.recurrent_states[index].copy_(tensor)
    layer.has_previous_state[index] = True
