"""Moving one request's cache between transformers' cache object and pool units.

Rows are units as flat bytes (`GroupCodec` says where each layer's parts sit); the pool's
`TorchPageStorage` gathers and scatters them. Writing goes cache -> rows, restoring goes
rows -> tensors -> a fresh `DynamicCache` that the model resumes from. Everything here works on
batch size 1 (one request); `batching` stacks requests for a decode step.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.cache_layout import GroupCodec, LayerKind, Part

#: Per layer of a group: its parts' tensors, batch dimension first (keys/values or conv/state).
LayerTensors = tuple[torch.Tensor, torch.Tensor]


def _to_bytes(tensor: torch.Tensor, num_rows: int) -> torch.Tensor:
    return tensor.contiguous().view(torch.uint8).reshape(num_rows, -1)


def _from_bytes(rows: torch.Tensor, part: Part) -> torch.Tensor:
    raw = rows[:, part.offset_bytes : part.offset_bytes + part.nbytes].contiguous()
    return raw.view(part.dtype).reshape(rows.shape[0], *part.shape)


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
                span = torch.nn.functional.pad(span, (0, 0, 0, padded - span.shape[1]))
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
        out.append((pair[0], pair[1]))
    return out


def state_row(cache: Any, codec: GroupCodec) -> torch.Tensor:
    """The group's live state (all its layers) as one row."""
    pieces = []
    for slot in codec.slots:
        layer = cache.layers[slot.layer_index]
        if codec.kind is LayerKind.LINEAR:
            conv = layer.conv_states[0][:, :, 1:]
            pieces += [_to_bytes(conv, 1), _to_bytes(layer.recurrent_states[0], 1)]
            continue
        for tensor, part in zip((layer.keys, layer.values), slot.parts, strict=True):
            window = tensor[:, :, -(codec.window_tokens - 1) :, :]
            pad = part.shape[1] - window.shape[2]
            pieces.append(_to_bytes(torch.nn.functional.pad(window, (0, 0, 0, pad)), 1))
    return torch.cat(pieces, dim=1)


def state_from_row(row: torch.Tensor, codec: GroupCodec, num_tokens: int) -> list[LayerTensors]:
    """Per layer, (conv, recurrent) with the conv padded back to `kernel` columns, or the
    sliding window's (keys, values) of the last min(num_tokens, W - 1) tokens."""
    out: list[LayerTensors] = []
    kept = min(num_tokens, codec.window_tokens - 1)
    for slot in codec.slots:
        first, second = (_from_bytes(row, part) for part in slot.parts)
        if codec.kind is LayerKind.LINEAR:
            first = torch.nn.functional.pad(first, (1, 0))
        else:
            first, second = first[:, :, :kept].contiguous(), second[:, :, :kept].contiguous()
        out.append((first, second))
    return out


def new_cache(model_config: Any) -> Any:
    return DynamicCache(config=model_config)


def install_attention(cache: Any, codec: GroupCodec, tensors: list[LayerTensors]) -> None:
    for slot, (keys, values) in zip(codec.slots, tensors, strict=True):
        layer = cache.layers[slot.layer_index]
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values


def install_state(
    cache: Any, codec: GroupCodec, tensors: list[LayerTensors], num_tokens: int
) -> None:
    """Put a restored state into the cache as if the model had just run `num_tokens` tokens."""
    for slot, (first, second) in zip(codec.slots, tensors, strict=True):
        layer = cache.layers[slot.layer_index]
        if codec.kind is LayerKind.LINEAR:
            layer.lazy_initialization(
                conv_states=first, recurrent_states=second, conv_kernel_size=codec.conv_kernel
            )
            layer.conv_states[0].copy_(first)
            layer.recurrent_states[0].copy_(second)
            layer.has_previous_state[0] = True
        else:
            layer.lazy_initialization(first, second)
            layer.keys, layer.values = first, second
            layer.cumulative_length = num_tokens
