"""Names of what travels: request ids and the (layer, group, token range) slices of a KVCache.

A request's cache is shipped as slices. A slice is one layer of one kvcache group over a token
range, in the C-order layout of its `shape`:

    block-level KV (GQA, MLA):   tokens [start, end) of the *uncached* tail, e.g. GQA layer 7,
                                 group 0, tokens [4096, 6144), shape (2, 2048, 4, 128) float16
    request-level state (linear, SWA): the state valid at exactly `end` tokens; start = end,
                                 e.g. KDA layer 3, group 1, tokens [6144, 6144),
                                 shape (32, 128, 128) float32

Layer-wise pipelining (paper section 3) falls out of this: a prefill instance sends a layer's
slices as soon as that layer finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

RequestId = NewType("RequestId", str)
SessionId = NewType("SessionId", bytes)

MAX_REQUEST_ID_BYTES = 128


@dataclass(frozen=True, slots=True, order=True)
class SliceKey:
    """Where a slice belongs in the decode instance's pool."""

    layer: int
    group: int
    token_start: int
    token_end: int

    def __post_init__(self) -> None:
        if min(self.layer, self.group, self.token_start) < 0:
            raise ValueError(f"negative field in {self}")
        if self.token_end < self.token_start:
            raise ValueError(f"token range ends before it starts in {self}")


@dataclass(frozen=True, slots=True)
class SliceMeta:
    """A slice's key plus how to read its bytes: numpy-style dtype name and shape."""

    key: SliceKey
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
