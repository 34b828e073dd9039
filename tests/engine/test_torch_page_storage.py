"""TorchPageStorage: the byte protocol of the pool and batched unit access agree."""

from __future__ import annotations

import pytest
import torch

from prfaas.engine import TorchPageStorage
from prfaas.kvcache import CacheMisuseError, PageId


def pages(*ids: int) -> list[PageId]:
    return [PageId(i) for i in ids]


def test_bytes_written_over_scattered_pages_read_back() -> None:
    storage = TorchPageStorage(num_pages=6, page_bytes=4)
    storage.write(pages(5, 1, 3), bytes(range(10)))
    assert storage.read(pages(5, 1, 3), 10) == bytes(range(10))
    storage.copy(pages(5, 1), pages(0, 2))
    assert storage.read(pages(0, 2), 8) == bytes(range(8))
    with pytest.raises(CacheMisuseError):
        storage.write(pages(0), bytes(5))


def test_units_gather_and_scatter_as_rows() -> None:
    storage = TorchPageStorage(num_pages=8, page_bytes=4)
    rows = torch.arange(2 * 7, dtype=torch.uint8).reshape(2, 7)
    units = [pages(6, 0), pages(3, 5)]
    storage.scatter_units(units, rows)
    gathered = storage.gather_units(units)
    assert gathered.shape == (2, 8)
    assert torch.equal(gathered[:, :7], rows)
    assert storage.read(pages(3, 5), 7) == bytes(range(7, 14))
