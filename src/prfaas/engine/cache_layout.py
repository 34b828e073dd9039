"""How a transformers cache maps onto the pool's groups, units and bytes (the cache codec).

The layout is read off the model's own cache object, not off a list of model names: one
forward of one token fills every cache layer the model keeps, and each layer is taken apart
into the components it holds (transformers 5.24 cache layer classes):

    DynamicLayer                              attention KV (full)
    DynamicSlidingWindowLayer                 attention KV (window W)
    LinearAttentionLayer                      conv and/or recurrent state per state index
                                              (GDN, KDA, Mamba, Mamba2, short conv)
    LinearAttentionAnd{Full,SlidingWindow}... both at once (parallel hybrid layers: falcon_h1,
                                              zamba's shared-attention layers)
    DummyLayer                                nothing (MLP-only layers, KV-sharing readers)
    a cache's `linear_cache` list             a lightning-attention state per layer (MiniMax)

The pool's groups come from the model's config through `prfaas.specs` (`model_from_hf_config`)
with the dtype sizes the model really runs in; each spec group takes the cache components of
its kind (and, when a kind has several groups, the ones of its byte size), and
`derive_cache_layout` checks byte for byte that the two agree. Inside one unit, each layer of
the group holds its parts back to back:

    attention block (GQA, MLA latent), B tokens      keys (Hk, B, Dk) | values (Hv, B, Dv)
    state snapshot                                   per state index: conv (C, kernel - 1) |
                                                     recurrent (its own shape); lightning (H, D, D)
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
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import (
    DummyLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionAndSlidingWindowAttentionLayer,
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

#: Cache layer classes whose components this module knows how to take apart.
_KNOWN_LAYERS = (
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionAndSlidingWindowAttentionLayer,
    DummyLayer,
)


class LayerKind(StrEnum):
    """The kind of a pool group's contents (a layer may hold components of two kinds)."""

    FULL = "full"
    SLIDING = "sliding"
    LINEAR = "linear"


class Source(StrEnum):
    """Where a part lives in transformers' cache object."""

    KEYS = "keys"
    VALUES = "values"
    CONV = "conv"  # layer.conv_states[state_index], kept without its oldest column
    RECURRENT = "recurrent"  # layer.recurrent_states[state_index]
    LIGHTNING = "lightning"  # cache.linear_cache[layer] (MiniMaxCache)


@dataclass(frozen=True, slots=True)
class Part:
    """One tensor of one layer inside a unit: `shape` per unit, at `offset_bytes`."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset_bytes: int
    source: Source = Source.KEYS
    state_index: int = 0

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class LayerSlot:
    layer_index: int
    parts: tuple[Part, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)


@dataclass(frozen=True, slots=True)
class GroupCodec:
    """One pool group: its layers in model order and, for SWA, the window."""

    group: GroupSpec
    kind: LayerKind
    slots: tuple[LayerSlot, ...]
    window_tokens: int = 0

    @property
    def unit_bytes(self) -> int:
        return sum(s.nbytes for s in self.slots)

    def slot_of(self, layer_index: int) -> LayerSlot | None:
        return next((s for s in self.slots if s.layer_index == layer_index), None)

    def slot_range(self, slot: LayerSlot) -> tuple[int, int]:
        """Where one layer's parts lie in a unit: bytes [start, stop)."""
        start = slot.parts[0].offset_bytes
        return start, start + slot.nbytes

    def layer_codec(self, slot: LayerSlot) -> GroupCodec:
        """This group cut down to one layer, its part offsets counted from the layer's start:
        the codec of the bytes `slot_range` delimits (a layer loaded on its own)."""
        start, _ = self.slot_range(slot)
        parts = tuple(
            dataclasses.replace(p, offset_bytes=p.offset_bytes - start) for p in slot.parts
        )
        return dataclasses.replace(self, slots=(LayerSlot(slot.layer_index, parts),))


@dataclass(frozen=True, slots=True)
class CacheLayout:
    """The model's pool groups (in `PageLayout` order), the spec they were derived from, and
    how to make an empty cache object of the class the model uses."""

    spec: ModelSpec
    block_tokens: int
    groups: tuple[GroupCodec, ...]
    num_layers: int
    make_cache: Callable[[], Any]
    #: Whether a multi-token forward continues from a cached state (chunked prefill, a suffix
    #: after a prefix hit); when not, the engine continues one token at a time.
    resumes_chunks: bool = True

    def new_cache(self) -> Any:
        return self.make_cache()

    def groups_of_layer(self, layer_index: int) -> list[GroupCodec]:
        """Every group holding part of a layer (two for a parallel hybrid layer, none for an
        MLP-only layer), in group order."""
        return [c for c in self.groups if c.slot_of(layer_index) is not None]

    @property
    def attention_groups(self) -> list[GroupCodec]:
        return [c for c in self.groups if c.kind is LayerKind.FULL]

    @property
    def state_groups(self) -> list[GroupCodec]:
        return [c for c in self.groups if c.kind is not LayerKind.FULL]


@dataclass(frozen=True, slots=True)
class _Component:
    """One layer's share of one kind: its parts' (name, source, index, dtype, unit shape)."""

    layer_index: int
    kind: LayerKind
    parts: tuple[tuple[str, Source, int, torch.dtype, tuple[int, ...]], ...]
    window_tokens: int = 0

    def nbytes(self) -> int:
        total = 0
        for *_, dtype, shape in self.parts:
            count = 1
            for dim in shape:
                count *= dim
            total += count * dtype.itemsize
        return total

    def signature(self) -> tuple[Any, ...]:
        return (self.kind, self.window_tokens, self.parts)


def cache_layer(cache: Any, index: int) -> Any:
    """Layer `index` of a cache, created when a lazily grown cache (MiniMaxCache) has not
    reached it yet."""
    while len(cache.layers) <= index and cache.layer_class_to_replicate is not None:
        cache.layers.append(cache.layer_class_to_replicate())
    return cache.layers[index]


def _is_known(layer: object) -> bool:
    return isinstance(layer, _KNOWN_LAYERS)


def _is_linear(layer: object) -> bool:
    return isinstance(layer, LinearAttentionLayer)


def _components(cache: Any, index: int, block_tokens: int) -> list[_Component]:
    """What layer `index` of a probed cache holds, per kind."""
    out: list[_Component] = []
    layer: Any = cache.layers[index] if index < len(cache.layers) else None
    if layer is not None and not _is_known(layer):
        raise CacheLayoutError(f"unsupported cache layer {type(layer).__name__}")
    keys = getattr(layer, "keys", None)
    if isinstance(keys, torch.Tensor) and keys.numel():
        values = layer.values
        sliding = isinstance(layer, DynamicSlidingWindowLayer)
        window = int(getattr(layer, "sliding_window", 0)) if sliding else 0
        tokens = window or block_tokens
        out.append(
            _Component(
                index,
                LayerKind.SLIDING if sliding else LayerKind.FULL,
                (
                    ("keys", Source.KEYS, 0, keys.dtype, (keys.shape[1], tokens, keys.shape[3])),
                    (
                        "values",
                        Source.VALUES,
                        0,
                        values.dtype,
                        (values.shape[1], tokens, values.shape[3]),
                    ),
                ),
                window,
            )
        )
    states: list[tuple[str, Source, int, torch.dtype, tuple[int, ...]]] = []
    if _is_linear(layer):
        for i in range(layer.number_of_states):
            conv, recurrent = layer.conv_states[i], layer.recurrent_states[i]
            if conv is not None:
                shape = (*conv.shape[1:-1], int(layer.conv_kernel_size[i]) - 1)
                states.append((f"conv{i}", Source.CONV, i, conv.dtype, shape))
            if recurrent is not None:
                shape = tuple(recurrent.shape[1:])
                states.append((f"recurrent{i}", Source.RECURRENT, i, recurrent.dtype, shape))
    lightning = getattr(cache, "linear_cache", None)
    if isinstance(lightning, list) and index < len(lightning):
        state = lightning[index]
        if isinstance(state, torch.Tensor):
            states.append(("lightning", Source.LIGHTNING, 0, state.dtype, tuple(state.shape[1:])))
    if states:
        dtypes = {dtype for _, _, _, dtype, _ in states}
        if len(dtypes) > 1:
            raise CacheLayoutError(
                f"layer {index}: states of mixed dtypes {sorted(map(str, dtypes))}"
            )
        out.append(_Component(index, LayerKind.LINEAR, tuple(states)))
    return out


def decoder_layers(model: Any) -> Any:
    """The model's decoder layers in order (`model.layers`, or `backbone.layers` for Mamba)."""
    layers = getattr(model.get_decoder(), "layers", None)
    if (
        layers is None
        or len(layers) != model.config.get_text_config(decoder=True).num_hidden_layers
    ):
        raise CacheLayoutError(f"{type(model).__name__}: cannot find its decoder layers")
    return layers


def _cache_factory(model: Any) -> Callable[[], Any]:
    """The model's own cache class: the one its forward builds when given none."""
    with torch.no_grad():
        out = model(torch.zeros((1, 1), dtype=torch.long), use_cache=True)
    cache_class = type(out.cache)
    if cache_class is DynamicCache:
        config = model.config
        return lambda: DynamicCache(config=config)
    return cache_class


def _kind_of(group: MixerGroup) -> LayerKind:
    if isinstance(group, GqaAttention | MlaAttention):
        return LayerKind.FULL
    if isinstance(group, SlidingWindowAttention):
        return LayerKind.SLIDING
    return LayerKind.LINEAR


def derive_cache_layout(model: Any, name: str, block_tokens: int) -> CacheLayout:
    """Probe the model's cache tensors with one token and lay them out in the pool's groups."""
    make_cache = _cache_factory(model)
    probe = make_cache()
    with torch.no_grad():
        model(torch.zeros((1, 1), dtype=torch.long), cache=probe, use_cache=True)
    num_layers = len(decoder_layers(model))
    buckets: dict[tuple[Any, ...], list[_Component]] = defaultdict(list)
    for index in range(num_layers):
        for component in _components(probe, index, block_tokens):
            buckets[component.signature()].append(component)
    spec = model_from_hf_config(model.config.to_dict(), name)
    matched = _match(spec, list(buckets.values()), name)
    spec = dataclasses.replace(
        spec, mixers=tuple(_with_dtypes(g, c[0]) for g, c in zip(spec.mixers, matched, strict=True))
    )
    page_layout = PageLayout.from_model(spec, block_tokens)
    groups = tuple(
        _group_codec(group, components)
        for group, components in zip(page_layout.groups, matched, strict=True)
    )
    for codec in groups:
        if codec.unit_bytes != codec.group.unit_bytes:
            raise CacheLayoutError(
                f"{name}: group {codec.group.name} holds {codec.unit_bytes} B per unit in "
                f"transformers' cache but the spec says {codec.group.unit_bytes} B"
            )
    resumes = _resumes_chunks(model, make_cache)
    return CacheLayout(spec, block_tokens, groups, num_layers, make_cache, resumes)


_PROBE_TOKENS = 8


def _resumes_chunks(model: Any, make_cache: Callable[[], Any]) -> bool:
    """Whether two forwards (5 tokens, then 3 from the cache) give the last logits of one
    forward of all 8: transformers' torch fallbacks of some state layers (Mamba-1, MiniMax
    lightning) ignore the cached state in a multi-token forward."""
    ids = torch.arange(3, 3 + _PROBE_TOKENS, dtype=torch.long).unsqueeze(0)
    split = 5
    with torch.no_grad():
        whole = model(input_ids=ids).logits[0, -1]
        cache = make_cache()
        model(input_ids=ids[:, :split], cache=cache, use_cache=True)
        positions = torch.arange(split, _PROBE_TOKENS).unsqueeze(0)
        resumed = model(
            input_ids=ids[:, split:], position_ids=positions, cache=cache, use_cache=True
        ).logits[0, -1]
    return bool(torch.allclose(resumed, whole, rtol=1e-3, atol=1e-3 * float(whole.abs().max())))


def _match(spec: ModelSpec, buckets: list[list[_Component]], name: str) -> list[list[_Component]]:
    """For each spec group, the cache components it holds: the one bucket of its kind, or
    (several buckets of one kind) the bucket with its layer count and bytes per layer."""
    free = list(buckets)
    matched: list[list[_Component]] = []
    for group in spec.mixers:
        kind = _kind_of(group)
        same_kind = [b for b in free if b[0].kind is kind]
        if len(same_kind) > 1:
            same_kind = [b for b in same_kind if len(b) == group.num_layers]
        if len(same_kind) != 1 or len(same_kind[0]) != group.num_layers:
            counts = [len(b) for b in free if b[0].kind is kind]
            raise CacheLayoutError(
                f"{name}: the config has {group.num_layers} {kind} layers of one shape, "
                f"the model's cache has {counts or 'none'}"
            )
        matched.append(same_kind[0])
        free.remove(same_kind[0])
    if free:
        extra = sorted({str(b[0].kind) for b in free})
        raise CacheLayoutError(f"{name}: the cache keeps {', '.join(extra)} state the config lacks")
    return matched


def _with_dtypes(group: MixerGroup, component: _Component) -> MixerGroup:
    """The spec group with the cache dtype sizes this model runs in (e.g. fp32 on CPU)."""
    sizes = {source: dtype.itemsize for _, source, _, dtype, _ in component.parts}
    if isinstance(group, LinearAttention):
        state = sizes.get(Source.RECURRENT, sizes.get(Source.LIGHTNING, group.state_dtype_bytes))
        conv = sizes.get(Source.CONV, group.conv_dtype_bytes)
        return dataclasses.replace(group, state_dtype_bytes=state, conv_dtype_bytes=conv)
    return dataclasses.replace(group, kv_dtype_bytes=sizes[Source.KEYS])


def _group_codec(group: GroupSpec, components: list[_Component]) -> GroupCodec:
    slots: list[LayerSlot] = []
    offset = 0
    for component in components:
        parts = []
        for part_name, source, state_index, dtype, shape in component.parts:
            part = Part(part_name, dtype, tuple(int(d) for d in shape), offset, source, state_index)
            parts.append(part)
            offset += part.nbytes
        slots.append(LayerSlot(component.layer_index, tuple(parts)))
    first = components[0]
    return GroupCodec(group, first.kind, tuple(slots), first.window_tokens)
