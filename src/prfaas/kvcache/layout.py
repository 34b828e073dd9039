"""Page layout: how a model's layer groups share one pool of equal-sized pages.

The pool has one page size so that every group allocates from the same free list (paper
section 3, "aligned block sizes"). Two kinds of groups draw from it:

- ATTENTION groups (GQA, MLA): block-level KV. One *block* is the KV of `block_tokens` (B) tokens
  for all the group's layers; it is also the unit of prefix identity (one chained hash per block).
- STATE groups (linear attention / SSM, sliding windows): one *snapshot* is the whole state of
  the group's layers at an exact token count; its size does not depend on the length.

The alignment rule. A snapshot is far larger than a block (Kimi-Linear-48B at B=512: a 4.1 MB
MLA block next to a 43.4 MB KDA state). vLLM unified the two by inflating the attention block
until it matched the state (528-token blocks for Qwen3-Next, vLLM #40696), which coarsens the
prefix-hit granularity. We never touch B. Instead the *page* is a fraction of the widest
attention block:

    page_bytes      = align_256(widest_attention_block_bytes / m)
    m               = smallest power of two dividing B whose pages leave every group's
                      padding at or under `max_padding_fraction` (default 5%)
    pages per unit  = ceil(unit_bytes / page_bytes)        (a fixed number per group)

Worked example, Kimi-Linear-48B, B = 512 (m = 1):
    MLA block  = 512 tokens * 8,064 B        =  4,128,768 B = 1 page
    KDA state  = 41,943,040 + 1,474,560 B    = 43,417,600 B -> 11 pages (45,416,448 B),
                 padding 1,998,848 B = 4.4% of the 11 pages
MiMo-V2-Flash at B = 512 needs m = 4: a 2,949,120 B page, GQA block = 4 pages, the 128-token
SWA window (25,559,040 B) = 9 pages with 3.7% padding (m = 1 would waste 28%).

Callers: `CacheConfig` builds one layout per pool; the index compares layouts at registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from prfaas.kvcache.errors import CacheConfigError
from prfaas.specs.model import (
    GqaAttention,
    LinearAttention,
    MixerGroup,
    MlaAttention,
    ModelSpec,
    SlidingWindowAttention,
)

#: Pages start on this byte boundary so typed views of any dtype and vector copies stay aligned.
PAGE_ALIGN_BYTES = 256
#: Default bound on the share of a unit's pages that is padding.
DEFAULT_MAX_PADDING_FRACTION = 0.05


class GroupKind(StrEnum):
    """ATTENTION: block-level KV, partial prefix match. STATE: request-level snapshots, valid only
    at an exact token count."""

    ATTENTION = "attention"
    STATE = "state"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One layer group of the pool: how many pages one of its units (block or snapshot) takes."""

    index: int
    name: str
    kind: GroupKind
    num_layers: int
    unit_bytes: int
    pages_per_unit: int
    page_bytes: int

    @property
    def allocated_bytes(self) -> int:
        return self.pages_per_unit * self.page_bytes

    @property
    def padding_bytes(self) -> int:
        return self.allocated_bytes - self.unit_bytes

    @property
    def padding_fraction(self) -> float:
        return self.padding_bytes / self.allocated_bytes


@dataclass(frozen=True, slots=True)
class PageLayout:
    """The pool's page size and its groups, in the model's mixer order."""

    block_tokens: int
    pages_per_block: int
    page_bytes: int
    groups: tuple[GroupSpec, ...]

    @property
    def attention_groups(self) -> tuple[GroupSpec, ...]:
        return tuple(g for g in self.groups if g.kind is GroupKind.ATTENTION)

    @property
    def state_groups(self) -> tuple[GroupSpec, ...]:
        return tuple(g for g in self.groups if g.kind is GroupKind.STATE)

    @property
    def group_kinds(self) -> tuple[GroupKind, ...]:
        return tuple(g.kind for g in self.groups)

    @property
    def page_tokens(self) -> int:
        """Tokens of the widest attention group one page holds (the kernel's page size)."""
        return self.block_tokens // self.pages_per_block

    def max_padding_fraction(self) -> float:
        return max(g.padding_fraction for g in self.groups)

    @classmethod
    def from_model(
        cls,
        spec: ModelSpec,
        block_tokens: int,
        *,
        max_padding_fraction: float = DEFAULT_MAX_PADDING_FRACTION,
    ) -> PageLayout:
        """Apply the alignment rule of the module docstring to `spec`'s mixer groups."""
        if block_tokens < 1:
            raise CacheConfigError(f"block_tokens must be positive, got {block_tokens}")
        units = [_unit(group, block_tokens) for group in spec.mixers]
        if not units:
            raise CacheConfigError(f"{spec.name}: no layer group keeps a cache")
        attention = [u for u in units if u[1] is GroupKind.ATTENTION]
        if not attention:
            page_bytes = _align(max(u[3] for u in units))
            return cls._build(block_tokens, 1, page_bytes, units)
        widest = max(u[3] for u in attention)
        candidates: list[PageLayout] = []
        for m in _power_of_two_divisors(block_tokens):
            layout = cls._build(block_tokens, m, _align(-(-widest // m)), units)
            if layout.max_padding_fraction() <= max_padding_fraction:
                return layout
            candidates.append(layout)
        return min(candidates, key=lambda layout: layout.max_padding_fraction())

    @classmethod
    def _build(
        cls,
        block_tokens: int,
        pages_per_block: int,
        page_bytes: int,
        units: list[tuple[str, GroupKind, int, int]],
    ) -> PageLayout:
        groups = tuple(
            GroupSpec(
                index=i,
                name=name,
                kind=kind,
                num_layers=num_layers,
                unit_bytes=unit_bytes,
                pages_per_unit=-(-unit_bytes // page_bytes),
                page_bytes=page_bytes,
            )
            for i, (name, kind, num_layers, unit_bytes) in enumerate(units)
        )
        return cls(block_tokens, pages_per_block, page_bytes, groups)


def _unit(group: MixerGroup, block_tokens: int) -> tuple[str, GroupKind, int, int]:
    """(name, kind, layers, bytes of one block or snapshot) of one mixer group."""
    if isinstance(group, GqaAttention | MlaAttention):
        name = "gqa" if isinstance(group, GqaAttention) else "mla"
        unit = block_tokens * group.kv_bytes_per_token()
        return name, GroupKind.ATTENTION, group.num_layers, unit
    if isinstance(group, SlidingWindowAttention):
        # The snapshot always reserves the full window: a fixed page count per snapshot.
        unit = group.state_bytes(group.window_tokens)
        return "swa", GroupKind.STATE, group.num_layers, unit
    assert isinstance(group, LinearAttention)
    return group.kind.value, GroupKind.STATE, group.num_layers, group.state_bytes(0)


def _align(num_bytes: int) -> int:
    return -(-num_bytes // PAGE_ALIGN_BYTES) * PAGE_ALIGN_BYTES


def _power_of_two_divisors(block_tokens: int) -> list[int]:
    """1, 2, 4, ... up to the largest power of two dividing `block_tokens`."""
    divisors = [1]
    while block_tokens % (divisors[-1] * 2) == 0:
        divisors.append(divisors[-1] * 2)
    return divisors
