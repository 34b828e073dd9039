"""Layer-wise cache export and its wire-ready byte form (paper section 3, layer pipelining).

During the last prefill chunk, a forward hook on each decoder layer fires as soon as that layer
is done with the whole prompt and hands its pieces to a callback as `KvSlice`s: plain bytes
plus (layer, group, token range, dtype, shape). Only what the receiver lacks travels (KV the
receiver holds would cross the link again for nothing): attention KV of tokens [from_block * B, n)
and the final state at n.

    attention layer (GQA / MLA latent)  tokens [s, n), shape (n - s, Hk*Dk + Hv*Dv):
                                        per token its keys then its values, C order
    state layer (linear attention,      state at n (s = n), shape (elements,): its parts in
    Mamba, short conv, lightning)       unit order, e.g. conv (C, kernel - 1) then recurrent
    sliding-window layer                state at n (s = n), shape (min(n, W - 1), 2*H*D)

A layer in two groups (falcon_h1's attention + Mamba in one layer) gives two records, one per
group; an MLP-only layer gives none.

Each record is a `prfaas.kvcache.KvSlice`, the one KV record type from engine to wire and
back (the instance shell sends it as is: key = SliceKey(layer, group, token_start,
token_end), dtype, shape, nbytes = len(data)). The engine does not import `transfer`
(docs/architecture.md walls); `ExportedPrefill.to_bytes` is a standalone framing for tests
and the CLI.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from prfaas.engine.cache_io import read_states, sliding_window
from prfaas.engine.cache_layout import CacheLayout, GroupCodec, LayerKind, decoder_layers
from prfaas.engine.errors import CacheImportError
from prfaas.engine.sampling import TokenLogprob
from prfaas.kvcache import KvSlice

_HEADER = struct.Struct("<I")


ExportCallback = Callable[[KvSlice], None]


@dataclass(frozen=True, slots=True)
class ExportedPrefill:
    """What a prefill instance hands to a decode instance for one request."""

    request_id: str
    prompt_tokens: tuple[int, ...]
    first_token: int
    records: tuple[KvSlice, ...]
    first_logprob: TokenLogprob | None = None  # in process only (`to_bytes` leaves it out)

    def to_bytes(self) -> bytes:
        """A JSON header (length-prefixed) followed by every record's bytes in order."""
        header = {
            "request_id": self.request_id,
            "prompt_tokens": list(self.prompt_tokens),
            "first_token": self.first_token,
            "records": [
                [r.layer_index, r.group_index, r.token_start, r.token_end, r.dtype, list(r.shape)]
                for r in self.records
            ],
        }
        raw = json.dumps(header).encode()
        return _HEADER.pack(len(raw)) + raw + b"".join(r.data for r in self.records)

    @classmethod
    def from_bytes(cls, payload: bytes) -> ExportedPrefill:
        (size,) = _HEADER.unpack_from(payload)
        header = json.loads(payload[_HEADER.size : _HEADER.size + size])
        cursor = _HEADER.size + size
        records = []
        for layer, group, start, end, dtype, shape in header["records"]:
            nbytes = _numel(shape) * getattr(torch, dtype).itemsize
            data = payload[cursor : cursor + nbytes]
            records.append(KvSlice(layer, group, start, end, dtype, tuple(shape), data))
            cursor += nbytes
        if cursor != len(payload):
            raise CacheImportError(f"{len(payload) - cursor} trailing bytes in an export")
        return cls(
            header["request_id"],
            tuple(header["prompt_tokens"]),
            header["first_token"],
            tuple(records),
        )


def _numel(shape: list[int] | tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def layer_records(
    cache: Any, layout: CacheLayout, layer_index: int, token_start: int, num_tokens: int
) -> list[KvSlice]:
    """One layer's export, one record per group it belongs to: attention KV of
    [token_start, num_tokens), or its final state (none for an MLP-only layer)."""
    records = []
    for codec in layout.groups_of_layer(layer_index):
        slot = codec.slot_of(layer_index)
        assert slot is not None
        start = num_tokens
        if codec.kind is LayerKind.LINEAR:
            flat = torch.cat([p[0].reshape(-1) for p in read_states(cache, slot)])
        else:
            layer = cache.layers[layer_index]
            keys, values = layer.keys[0], layer.values[0]  # (H, T, D)
            if codec.kind is LayerKind.SLIDING:
                keys, values = (sliding_window(t, codec.window_tokens) for t in (keys, values))
            else:
                keys, values = keys[:, token_start:num_tokens], values[:, token_start:num_tokens]
                start = token_start
            flat = torch.cat([_token_major(keys), _token_major(values)], dim=1)
        data = flat.contiguous().view(torch.uint8).numpy().tobytes()
        shape = tuple(int(d) for d in flat.shape)
        records.append(
            KvSlice(
                layer_index,
                codec.group.index,
                start,
                num_tokens,
                _dtype_name(flat.dtype),
                shape,
                data,
            )
        )
    return records


def _token_major(tensor: torch.Tensor) -> torch.Tensor:
    heads, tokens, dim = tensor.shape
    return tensor.permute(1, 0, 2).reshape(tokens, heads * dim)


def record_tensors(record: KvSlice, codec: GroupCodec) -> tuple[torch.Tensor, ...]:
    """Back to the cache object's form (batch 1): (keys, values), or the state parts in unit
    form (see `cache_io.read_part`)."""
    slot = codec.slot_of(record.layer_index)
    if slot is None:
        raise CacheImportError(f"layer {record.layer_index} is not in group {codec.group.name}")
    dtype = getattr(torch, record.dtype)
    flat = torch.frombuffer(bytearray(record.data), dtype=dtype).reshape(record.shape)
    if codec.kind is LayerKind.LINEAR:
        if flat.numel() != sum(p.numel for p in slot.parts):
            raise CacheImportError(f"layer {record.layer_index}: state of {flat.numel()} elements")
        parts, cursor = [], 0
        for part in slot.parts:
            parts.append(flat[cursor : cursor + part.numel].reshape(1, *part.shape).clone())
            cursor += part.numel
        return tuple(parts)
    first, second = slot.parts
    tokens = flat.shape[0]
    split = first.shape[0] * first.shape[2]
    keys = flat[:, :split].reshape(tokens, first.shape[0], first.shape[2]).permute(1, 0, 2)
    values = flat[:, split:].reshape(tokens, second.shape[0], second.shape[2]).permute(1, 0, 2)
    return keys.unsqueeze(0).contiguous(), values.unsqueeze(0).contiguous()


class LayerExportHooks:
    """Forward hooks that export each decoder layer as soon as it has run the last chunk."""

    def __init__(
        self,
        model: Any,
        layout: CacheLayout,
        cache: Any,
        *,
        token_start: int,
        num_tokens: int,
        callback: ExportCallback,
    ) -> None:
        self._handles = []
        for index, module in enumerate(decoder_layers(model)):

            def hook(*_: Any, index: int = index) -> None:
                for record in layer_records(cache, layout, index, token_start, num_tokens):
                    callback(record)

            self._handles.append(module.register_forward_hook(hook))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
