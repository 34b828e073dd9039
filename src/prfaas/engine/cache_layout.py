"""How a transformers cache maps onto the pool's groups, units and bytes (the cache codec).

The pool's groups come from the model's config through `prfaas.specs` (`model_from_hf_config`),
with the dtype sizes the model really runs in, so the pool's arithmetic and the tensors agree;
`derive_cache_layout` checks that they do, byte for byte, and refuses a model whose cache does
not fit. Inside one unit, each layer of the group holds its parts back to back:

    attention block (GQA, MLA latent), B tokens      keys (Hk, B, Dk) | values (Hv, B, Dv)
    linear-attention snapshot                        conv (C, kernel - 1) | recurrent (H, Dk, Dv)
    sliding-window snapshot (window W)               keys (H, W, D) | values (H, W, D), first
                                                     min(n, W - 1) token slots used

Example, tiny-qwen3-next at B = 16 (fp32): a GQA block is 2 layers x (2x16x16 + 2x16x16) x 4 B
= 8,192 B; a GDN snapshot is 2 layers x (128x3 + 4x16x16) x 4 B = 11,264 B.

The conv state keeps kernel - 1 columns: transformers stores `kernel` but never reads the
oldest one (the causal conv of the next token sees the last kernel - 1 inputs and itself), so
restoring it as zeros is exact. Transformers' sliding-window layer likewise keeps W - 1 tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import (
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionLayer,
)

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.errors import CacheLayoutError
from prfaas.kvcache import GroupSpec, PageLayout
from prfaas.specs.hf_config import model_from_hf_config
from prfaas.specs.model import (
    GqaAttention,
    LinearAttention,
    MixerGroup,
    MlaAttention,
    ModelSpec,
    SlidingWindowAttention,
)


class LayerKind(StrEnum):
    FULL = "full"
    SLIDING = "sliding"
    LINEAR = "linear"


@dataclass(frozen=True, slots=True)
class Part:
    """One tensor of one layer inside a unit: `shape` per unit, at `offset_bytes`."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset_bytes: int

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class LayerSlot:
    layer_index: int
    parts: tuple[Part, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


@dataclass(frozen=True, slots=True)
class GroupCodec:
    """One pool group: its layers in model order and, for states, the window or conv kernel."""

    group: GroupSpec
    kind: LayerKind
    slots: tuple[LayerSlot, ...]
    window_tokens: int = 0
    conv_kernel: int = 0

    @property
    def unit_bytes(self) -> int:
        return sum(s.nbytes for s in self.slots)


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """The model's pool groups (in `PageLayout` order) and the spec they were derived from."""

    spec: ModelSpec
    block_tokens: int
    groups: tuple[GroupCodec, ...]
    layer_kinds: tuple[LayerKind, ...]

    def group_of_layer(self, layer_index: int) -> GroupCodec:
        for codec in self.groups:
            if any(s.layer_index == layer_index for s in codec.slots):
                return codec
        raise CacheLayoutError(f"layer {layer_index} keeps no cache")


def layer_kind(layer: object) -> LayerKind:
    """The kind of one transformers cache layer (sliding first: it subclasses DynamicLayer)."""
    if type(layer) is LinearAttentionLayer:
        return LayerKind.LINEAR
    if type(layer) is DynamicSlidingWindowLayer:
        return LayerKind.SLIDING
    if type(layer) is DynamicLayer:
        return LayerKind.FULL
    raise CacheLayoutError(f"unsupported cache layer {type(layer).__name__}")


def derive_cache_layout(model: Any, name: str, block_tokens: int) -> CacheLayout:
    """Probe the model's cache tensors with one token and lay them out in the pool's groups."""
    probe = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.zeros((1, 1), dtype=torch.long), cache=probe, use_cache=True)
    kinds = tuple(layer_kind(layer) for layer in probe.layers)
    spec = _with_runtime_dtypes(model_from_hf_config(model.config.to_dict(), name), probe, kinds)
    page_layout = PageLayout.from_model(spec, block_tokens)
    groups = tuple(_group_codec(group, probe, kinds, block_tokens) for group in page_layout.groups)
    for codec in groups:
        if codec.unit_bytes != codec.group.unit_bytes:
            raise CacheLayoutError(
                f"{name}: group {codec.group.name} holds {codec.unit_bytes} B per unit in "
                f"transformers' cache but the spec says {codec.group.unit_bytes} B"
            )
    return CacheLayout(spec, block_tokens, groups, kinds)


def _kind_of_group(group_name: str) -> LayerKind:
    if group_name in ("gqa", "mla"):
        return LayerKind.FULL
    return LayerKind.SLIDING if group_name == "swa" else LayerKind.LINEAR


def _first_of(probe: Any, kinds: tuple[LayerKind, ...], kind: LayerKind) -> Any:
    return probe.layers[kinds.index(kind)]


def _with_runtime_dtypes(spec: ModelSpec, probe: Any, kinds: tuple[LayerKind, ...]) -> ModelSpec:
    """The spec with the cache dtype sizes this model runs in (e.g. fp32 on CPU)."""
    mixers: list[MixerGroup] = []
    for group in spec.mixers:
        if isinstance(group, GqaAttention | MlaAttention):
            size = _first_of(probe, kinds, LayerKind.FULL).keys.dtype.itemsize
            mixers.append(dataclasses.replace(group, kv_dtype_bytes=size))
        elif isinstance(group, SlidingWindowAttention):
            size = _first_of(probe, kinds, LayerKind.SLIDING).keys.dtype.itemsize
            mixers.append(dataclasses.replace(group, kv_dtype_bytes=size))
        else:
            assert isinstance(group, LinearAttention)
            layer = _first_of(probe, kinds, LayerKind.LINEAR)
            mixers.append(
                dataclasses.replace(
                    group,
                    state_dtype_bytes=layer.recurrent_states[0].dtype.itemsize,
                    conv_dtype_bytes=layer.conv_states[0].dtype.itemsize,
                )
            )
    return dataclasses.replace(spec, mixers=tuple(mixers))


def _group_codec(
    group: GroupSpec, probe: Any, kinds: tuple[LayerKind, ...], block_tokens: int
) -> GroupCodec:
    kind = _kind_of_group(group.name)
    indices = [i for i, k in enumerate(kinds) if k is kind]
    if len(indices) != group.num_layers:
        raise CacheLayoutError(
            f"group {group.name}: spec has {group.num_layers} layers, cache has {len(indices)}"
        )
    window = kernel = 0
    slots: list[LayerSlot] = []
    offset = 0
    for index in indices:
        layer = probe.layers[index]
        if kind is LayerKind.LINEAR:
            kernel = int(layer.conv_kernel_size[0])
            conv, rec = layer.conv_states[0], layer.recurrent_states[0]
            shapes: list[tuple[str, torch.dtype, tuple[int, ...]]] = [
                ("conv", conv.dtype, (conv.shape[1], kernel - 1)),
                ("recurrent", rec.dtype, tuple(rec.shape[1:])),
            ]
        else:
            tokens = block_tokens
            if kind is LayerKind.SLIDING:
                window = tokens = int(layer.sliding_window)
            keys, values = layer.keys, layer.values
            shapes = [
                ("keys", keys.dtype, (keys.shape[1], tokens, keys.shape[3])),
                ("values", values.dtype, (values.shape[1], tokens, values.shape[3])),
            ]
        parts = []
        for part_name, dtype, shape in shapes:
            parts.append(Part(part_name, dtype, tuple(int(d) for d in shape), offset))
            offset += parts[-1].nbytes
        slots.append(LayerSlot(index, tuple(parts)))
    return GroupCodec(group, kind, tuple(slots), window, kernel)
