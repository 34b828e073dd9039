"""A hit's disk units loaded back layer by layer while the prefill computes (issue 28).

`PagedCache.allocate` reserves the pages of the hit's units that lie on disk without moving
their bytes (`Allocation.pending_loads`). A unit's bytes are laid out layer by layer
(`GroupCodec.slot_range`), so the load runs beside the model's first forward:

    reader thread   layer 0: pread layer 0's range of every promoted unit into its pages
                    layer 1: ... layer L-1, each layer marked ready as soon as it is in
    prefill         pre-hook of decoder layer i: wait until layer i is ready, then install
                    layer i's attention KV and state into the cache object
                    -> layer i computes while layers i+1.. are still being read

Before the forward, the cache object holds every layer restored from the pages as they are
(promoted ranges not yet read): the model sizes its masks and positions from the cache's
lengths before it reaches any layer, and those lengths are already right; the pre-hook then
replaces each layer's contents before the layer reads them.

A unit file gone or cut short is the whole-unit read's error (`CacheMisuseError`): the reader
stops, every waiting hook wakes and raises it, and the prefill fails as a failed whole-unit
load failed it before (the engine's step fails and the request is refused). The files of the
loaded units are deleted once read (or once the load failed): the pool's bookkeeping already
counts them in DRAM. On a failure the engine then abandons the request
(`HybridPrefixCache.abandon`): those units leave the prefix cache, their partly written pages
are freed with the request's, and the next request computes them afresh.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prfaas.engine.cache_layout import CacheLayout, decoder_layers
from prfaas.engine.disk_tier import FileTierStorage
from prfaas.engine.paged_cache import PagedCache
from prfaas.engine.storage import TorchPageStorage
from prfaas.kvcache import Allocation, CacheMisuseError, PageId
from prfaas.kvcache.tiers import Promoted, UnitKey


@dataclass(frozen=True, slots=True)
class LayerRange:
    """One layer's bytes [start, stop) of one promoted unit, and the pages they go to."""

    key: UnitKey
    pages: tuple[PageId, ...]
    start: int
    stop: int


def layer_ranges(layout: CacheLayout, loads: Sequence[Promoted]) -> list[list[LayerRange]]:
    """Per decoder layer, in layer order, the range of every promoted unit holding it."""
    plan: list[list[LayerRange]] = [[] for _ in range(layout.num_layers)]
    for move in loads:
        codec = layout.groups[move.key[0]]
        for slot in codec.slots:
            start, stop = codec.slot_range(slot)
            plan[slot.layer_index].append(LayerRange(move.key, move.pages, start, stop))
    return plan


def read_ranges(
    ranges: Sequence[LayerRange], files: dict[UnitKey, int], storage: TorchPageStorage
) -> None:
    """Read one layer's ranges from their unit files into their pages (the reader's step)."""
    for item in ranges:
        size = item.stop - item.start
        try:
            data = os.pread(files[item.key], size, item.start)
        except OSError as err:
            raise CacheMisuseError(f"unit {item.key} is unreadable: {err.strerror}") from None
        if len(data) != size:
            raise CacheMisuseError(
                f"unit {item.key} is torn: {len(data)} of {size} bytes at {item.start}"
            )
        storage.write_range(item.pages, item.start, data)


class LayerLoader:
    """The reader thread: loads `loads` layer by layer and says which layers are in."""

    def __init__(
        self,
        layout: CacheLayout,
        storage: TorchPageStorage,
        disk: FileTierStorage,
        loads: Sequence[Promoted],
    ) -> None:
        self._plan = layer_ranges(layout, loads)
        self._keys = [move.key for move in loads]
        self._storage = storage
        self._disk = disk
        self._ready = [threading.Event() for _ in self._plan]
        self._stop = threading.Event()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="layer-loader", daemon=True)
        self._thread.start()

    def wait(self, layer_index: int) -> None:
        """Block until layer `layer_index` is in its pages; the reader's error if it failed."""
        self._ready[layer_index].wait()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stop reading (a prefill that failed early) and wait for the thread."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        files: dict[UnitKey, int] = {}
        try:
            for key in self._keys:
                files[key] = self._open(key)
            for index, ranges in enumerate(self._plan):
                if self._stop.is_set():
                    return
                read_ranges(ranges, files, self._storage)
                self._ready[index].set()
        except Exception as err:  # handed to the waiting pre-hook, which raises it
            self._error = err
        finally:
            for handle in files.values():
                os.close(handle)
            for key in self._keys:
                self._disk.delete(key)
            for event in self._ready:  # wake every waiter (done, failed or stopped)
                event.set()

    def _open(self, key: UnitKey) -> int:
        try:
            return os.open(self._disk.path_of(key), os.O_RDONLY)
        except FileNotFoundError:
            raise CacheMisuseError(f"unit {key} is not on disk") from None
        except OSError as err:
            raise CacheMisuseError(f"unit {key} is unreadable: {err.strerror}") from None


class LayerLoading:
    """A prefill's layer-by-layer load: the reader plus one forward pre-hook per decoder
    layer that installs the layer once, the first time the model reaches it."""

    def __init__(self, model: Any, paged: PagedCache, allocation: Allocation, cache: Any) -> None:
        assert paged.disk is not None  # pending loads come only from a disk tier
        self._loader = LayerLoader(
            paged.layout, paged.storage, paged.disk, allocation.pending_loads
        )
        self._installed: set[int] = set()
        self._handles = []
        for index, module in enumerate(decoder_layers(model)):

            def hook(*_: Any, index: int = index) -> None:
                if index in self._installed:
                    return  # later chunks run on what the cache object holds by then
                self._loader.wait(index)
                paged.restore_layer(cache, allocation, index)
                self._installed.add(index)

            self._handles.append(module.register_forward_pre_hook(hook))

    @classmethod
    def start(
        cls, model: Any, paged: PagedCache, allocation: Allocation, cache: Any
    ) -> LayerLoading | None:
        """Start loading `allocation`'s pending units (None when the hit is all in DRAM)."""
        if not allocation.pending_loads:
            return None
        return cls(model, paged, allocation, cache)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._loader.close()
