"""`KvSlice`: one layer's (or state group's) cache bytes for a token range, the one record a
KV slice is from the engine that exports it to the engine that imports it.

Producers and consumers (docs/architecture.md, "One KV record"): the torch engine's layer-wise
export (`engine.export`) and its import, the emulated backend's scaled slices, the instance
shell that hands each one to `transfer.Sender.send_slice` (its `SliceKey` is
(layer_index, group_index, token_start, token_end), its payload `data`) and the claims ledger
that reads a committed transfer back from the receive sink. It lives here, in a pure package,
because both sides must import it and the engine may not import `serve` or `transfer`, while
`serve` must not load torch for an emulated instance.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KvSlice:
    """Bytes of `shape` (C order, numpy-style `dtype` name) for tokens [token_start, token_end)
    of layer `layer_index` in cache group `group_index`; a state's slice is the state at
    `token_end` (token_start == token_end)."""

    layer_index: int
    group_index: int
    token_start: int
    token_end: int
    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)
