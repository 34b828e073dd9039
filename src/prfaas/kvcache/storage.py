"""Pluggable storage behind the bookkeeping: where a page's bytes live, if anywhere.

The pool decides *which* pages hold what; storage holds the bytes. The simulator runs with no
storage at all (bookkeeping only). The engine backs the pool with one preallocated buffer of
`num_pages * page_bytes` bytes and views each page as typed tensors of its group (the torch side
belongs to the engine package). `NumpyPageStorage` is that buffer in NumPy, used by the tests to
prove that bytes written by one request are the bytes a later hit restores.

A unit (attention block or snapshot) may span several pages that are not adjacent, so moving a
unit is a gather (`read`) or a scatter (`write`) over its page list; a single page can be viewed
in place (`page_view`). Taking a snapshot is always a copy of the live state (`copy`), because
the live state keeps changing as the request runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from prfaas.kvcache.errors import CacheConfigError, CacheMisuseError
from prfaas.kvcache.ids import PageId


class PageStorage(Protocol):
    """Byte storage for `num_pages` pages of `page_bytes` each."""

    @property
    def num_pages(self) -> int: ...

    @property
    def page_bytes(self) -> int: ...

    def write(self, pages: Sequence[PageId], data: bytes) -> None:
        """Scatter `data` over `pages` in order; at most len(pages) * page_bytes bytes."""
        ...

    def read(self, pages: Sequence[PageId], num_bytes: int) -> bytes:
        """Gather the first `num_bytes` bytes stored across `pages`."""
        ...

    def copy(self, source: Sequence[PageId], target: Sequence[PageId]) -> None:
        """Copy page contents one to one (snapshot take and restore)."""
        ...


class NumpyPageStorage:
    """One preallocated uint8 buffer of shape (num_pages, page_bytes)."""

    def __init__(self, num_pages: int, page_bytes: int) -> None:
        if num_pages < 1 or page_bytes < 1:
            raise CacheConfigError(f"storage of {num_pages} x {page_bytes} bytes is empty")
        self._buffer: npt.NDArray[np.uint8] = np.zeros((num_pages, page_bytes), dtype=np.uint8)

    @property
    def num_pages(self) -> int:
        return int(self._buffer.shape[0])

    @property
    def page_bytes(self) -> int:
        return int(self._buffer.shape[1])

    def page_view(
        self, page: PageId, dtype: npt.DTypeLike, shape: tuple[int, ...]
    ) -> npt.NDArray[np.generic]:
        """A zero-copy typed view of the start of one page (e.g. one block's KV of a group)."""
        itemsize = np.dtype(dtype).itemsize
        count = int(np.prod(shape)) if shape else 1
        if count * itemsize > self.page_bytes:
            raise CacheMisuseError(f"{shape} of {np.dtype(dtype)} exceeds a page")
        raw = self._buffer[page, : count * itemsize]
        return raw.view(dtype).reshape(shape)

    def write(self, pages: Sequence[PageId], data: bytes) -> None:
        source = np.frombuffer(data, dtype=np.uint8)
        capacity = len(pages) * self.page_bytes
        if source.size > capacity:
            raise CacheMisuseError(f"{source.size} bytes do not fit {len(pages)} pages")
        for i, page in enumerate(pages):
            chunk = source[i * self.page_bytes : (i + 1) * self.page_bytes]
            self._buffer[page, : chunk.size] = chunk

    def read(self, pages: Sequence[PageId], num_bytes: int) -> bytes:
        if not 0 <= num_bytes <= len(pages) * self.page_bytes:
            raise CacheMisuseError(f"cannot read {num_bytes} bytes from {len(pages)} pages")
        gathered = self._buffer[list(pages)].reshape(-1) if pages else self._buffer[:0, 0]
        return gathered[:num_bytes].tobytes()

    def copy(self, source: Sequence[PageId], target: Sequence[PageId]) -> None:
        if len(source) != len(target):
            raise CacheMisuseError(f"copy of {len(source)} pages into {len(target)}")
        self._buffer[list(target)] = self._buffer[list(source)]
