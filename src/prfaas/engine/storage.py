"""`TorchPageStorage`: the pool's pages as one preallocated torch buffer.

The pool (`prfaas.kvcache`) decides which pages hold what; this buffer holds the bytes. It is
one `(num_pages, page_bytes)` uint8 tensor allocated once at start-up, so the pool's capacity is
real memory, nothing grows during serving, and a unit (an attention block or a state snapshot)
is a list of possibly scattered pages. Moving units is batched: `gather_units` reads many units
in one indexed copy and `scatter_units` writes them back, each unit as one row of
`pages_per_unit * page_bytes` bytes that the cache codec views as typed tensors per layer.
It also implements the byte-level `PageStorage` protocol the pool's facade uses
(`write_block`, `read_block`, `copy_block`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.kvcache import CacheConfigError, CacheMisuseError, PageId


class TorchPageStorage:
    """`num_pages` pages of `page_bytes` bytes in one uint8 tensor on `device`."""

    def __init__(self, num_pages: int, page_bytes: int, device: str = "cpu") -> None:
        if num_pages < 1 or page_bytes < 1:
            raise CacheConfigError(f"storage of {num_pages} x {page_bytes} bytes is empty")
        self.buffer = torch.zeros((num_pages, page_bytes), dtype=torch.uint8, device=device)

    @property
    def num_pages(self) -> int:
        return int(self.buffer.shape[0])

    @property
    def page_bytes(self) -> int:
        return int(self.buffer.shape[1])

    # --- the PageStorage protocol (bytes) --------------------------------------------------

    def write(self, pages: Sequence[PageId], data: bytes) -> None:
        capacity = len(pages) * self.page_bytes
        if len(data) > capacity:
            raise CacheMisuseError(f"{len(data)} bytes do not fit {len(pages)} pages")
        padded = bytearray(capacity)
        padded[: len(data)] = data
        rows = torch.frombuffer(padded, dtype=torch.uint8).view(len(pages), self.page_bytes)
        self.buffer[self._index(pages)] = rows.to(self.buffer.device)

    def read(self, pages: Sequence[PageId], num_bytes: int) -> bytes:
        if not 0 <= num_bytes <= len(pages) * self.page_bytes:
            raise CacheMisuseError(f"cannot read {num_bytes} bytes from {len(pages)} pages")
        if not pages:
            return b""
        gathered = self.buffer[self._index(pages)].reshape(-1)[:num_bytes]
        return gathered.cpu().numpy().tobytes()

    def copy(self, source: Sequence[PageId], target: Sequence[PageId]) -> None:
        if len(source) != len(target):
            raise CacheMisuseError(f"copy of {len(source)} pages into {len(target)}")
        self.buffer[self._index(target)] = self.buffer[self._index(source)]

    # --- batched typed access for the engine ----------------------------------------------

    def gather_units(self, units: Sequence[Sequence[PageId]]) -> torch.Tensor:
        """Units of equal page count as rows of a `(len(units), pages * page_bytes)` copy."""
        if not units:
            return self.buffer.new_zeros((0, 0))
        flat = [page for pages in units for page in pages]
        return self.buffer[self._index(flat)].view(len(units), -1)

    def scatter_units(self, units: Sequence[Sequence[PageId]], rows: torch.Tensor) -> None:
        """Write rows (one unit each, at most its pages' bytes) into the units' pages."""
        if not units:
            return
        per_unit = len(units[0]) * self.page_bytes
        if rows.dtype != torch.uint8 or rows.shape[0] != len(units) or rows.shape[1] > per_unit:
            raise CacheMisuseError(f"rows {tuple(rows.shape)} do not fit {len(units)} units")
        if rows.shape[1] < per_unit:
            rows = torch.nn.functional.pad(rows, (0, per_unit - rows.shape[1]))
        flat = [page for pages in units for page in pages]
        self.buffer[self._index(flat)] = rows.reshape(len(flat), self.page_bytes)

    def gather_range(
        self, units: Sequence[Sequence[PageId]], start: int, stop: int
    ) -> torch.Tensor:
        """Bytes [start, stop) of each unit (of equal page count) as rows: one layer's share,
        copied from only the pages that hold it."""
        if not units or stop <= start:
            return self.buffer.new_zeros((len(units), 0))
        first, last = start // self.page_bytes, (stop - 1) // self.page_bytes
        flat = [pages[k] for pages in units for k in range(first, last + 1)]
        rows = self.buffer[self._index(flat)].view(len(units), -1)
        base = first * self.page_bytes
        return rows[:, start - base : stop - base]

    def write_range(self, pages: Sequence[PageId], offset: int, data: bytes) -> None:
        """Write `data` at byte `offset` of the unit held by `pages` (a layer's share of a
        unit read from disk), touching no other byte of those pages."""
        if offset < 0 or offset + len(data) > len(pages) * self.page_bytes:
            raise CacheMisuseError(f"{len(data)} bytes at {offset} do not fit {len(pages)} pages")
        source = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else None
        done = 0
        while source is not None and done < len(data):
            page, within = divmod(offset + done, self.page_bytes)
            size = min(self.page_bytes - within, len(data) - done)
            target = self.buffer[pages[page], within : within + size]
            target.copy_(source[done : done + size])
            done += size

    def _index(self, pages: Sequence[PageId]) -> torch.Tensor:
        return torch.tensor(list(pages), dtype=torch.long, device=self.buffer.device)
