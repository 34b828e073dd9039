"""Where received KV lands: the `PageSink` protocol and a NumPy-backed implementation.

The receiver never owns memory. For each slice it asks the sink for destination pages, reads
the payload straight into them, and at the end of the request either commits (all slices
arrived and verified) or frees (abort, stall, lost sender, corrupt frame). The decode
instance's kvcache pool implements `PageSink` over its block pool; `ArraySink` is the stand-in
until then and the reference the contract tests check against.

A slice's bytes are the C-order layout of its `shape`; a sink may hand them back as several
page-sized views (a scatter list), in that byte order:

    slice of 10,000 bytes, pages of 4,096 bytes  ->  [4096 | 4096 | 1808]   (3 pages)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from prfaas.transfer.keys import RequestId, SliceKey, SliceMeta


class PageSink(Protocol):
    """Destination pages for incoming requests, owned by the decode instance's pool."""

    def allocate(self, request_id: RequestId, meta: SliceMeta) -> Sequence[memoryview] | None:
        """Writable views totalling `meta.nbytes` for one slice, or None when out of space
        (the receiver then aborts the request). Allocating one key twice is misuse."""
        ...

    def commit(self, request_id: RequestId) -> None:
        """Every slice of the request arrived intact: its pages become the request's cache."""
        ...

    def free(self, request_id: RequestId) -> None:
        """Release every page allocated for an uncommitted request (nothing held is fine)."""
        ...


@dataclass(slots=True)
class _Held:
    slices: dict[SliceKey, tuple[SliceMeta, list[int]]] = field(default_factory=dict)
    is_committed: bool = False


class ArraySink:
    """A fixed arena of equal pages in one NumPy array, with a free list."""

    def __init__(self, capacity_bytes: int, page_bytes: int = 64 * 1024) -> None:
        self.page_bytes = page_bytes
        self.num_pages = capacity_bytes // page_bytes
        self._arena = np.zeros(self.num_pages * page_bytes, dtype=np.uint8)
        self._view = memoryview(self._arena.data).cast("B")
        self._free: list[int] = list(range(self.num_pages - 1, -1, -1))
        self._held: dict[RequestId, _Held] = {}

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    def allocate(self, request_id: RequestId, meta: SliceMeta) -> list[memoryview] | None:
        held = self._held.setdefault(request_id, _Held())
        if held.is_committed or meta.key in held.slices:
            raise ValueError(f"{request_id}: slice {meta.key} allocated twice")
        count = -(-meta.nbytes // self.page_bytes)
        if count > len(self._free):
            return None
        pages = [self._free.pop() for _ in range(count)]
        held.slices[meta.key] = (meta, pages)
        return self._views(meta.nbytes, pages)

    def commit(self, request_id: RequestId) -> None:
        # a transfer with no slice (the decode side held everything) commits empty
        held = self._held.setdefault(request_id, _Held())
        if held.is_committed:
            raise ValueError(f"{request_id} committed twice")
        held.is_committed = True

    def free(self, request_id: RequestId) -> None:
        held = self._held.pop(request_id, None)
        if held is None:
            return
        if held.is_committed:
            self._held[request_id] = held
            raise ValueError(f"{request_id} is committed; release it instead")
        self._return(held)

    def release(self, request_id: RequestId) -> None:
        """The decode side is done with a committed request: its pages go back."""
        held = self._held.pop(request_id)
        if not held.is_committed:
            self._held[request_id] = held
            raise ValueError(f"{request_id} is not committed")
        self._return(held)

    def committed(self, request_id: RequestId) -> dict[SliceKey, tuple[SliceMeta, bytes]]:
        """A committed request's slices, each gathered from its pages in one copy (the decode
        side imports them; tests compare them bit for bit)."""
        held = self._held[request_id]
        if not held.is_committed:
            raise ValueError(f"{request_id} is not committed")
        return {
            key: (meta, b"".join(self._views(meta.nbytes, pages)))
            for key, (meta, pages) in held.slices.items()
        }

    def _views(self, nbytes: int, pages: list[int]) -> list[memoryview]:
        views = []
        for page in pages:
            size = min(self.page_bytes, nbytes)
            start = page * self.page_bytes
            views.append(self._view[start : start + size])
            nbytes -= size
        return views

    def _return(self, held: _Held) -> None:
        for _, pages in held.slices.values():
            self._free.extend(pages)
