"""A hit on disk is loaded back layer by layer while the prefill computes (issue 28,
docs/kvcache.md "Tiers"): the same tokens as computed from scratch, layer 0 computing before
the reader has read the last layer, a torn unit file refused with the whole-unit read's error,
and every layer's bytes in the pages exactly as demoted."""

from __future__ import annotations

import itertools
import random
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from engine_helpers import GREEDY, SMALL, prefix_on_disk, preset
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.engine import Engine, layer_load
from prfaas.engine.cache_layout import decoder_layers
from prfaas.engine.disk_tier import FileTierStorage
from prfaas.engine.layer_load import LayerLoader, LayerRange, layer_ranges
from prfaas.engine.storage import TorchPageStorage
from prfaas.kvcache import BlockHash, BlockRemoved, CacheMisuseError, PageId
from prfaas.kvcache.tiers import Medium, Promoted, UnitKey

#: A test's hook ahead of each reader step: (the step's ranges, its open files, layer index).
BeforeRead = Callable[[Sequence[LayerRange], dict[UnitKey, int], int], None]


def record_reads(monkeypatch: pytest.MonkeyPatch, before: BeforeRead | None = None) -> list[int]:
    """Count the reader's layer steps (their layer index, in the order read); `before` runs
    ahead of each step with the step's arguments and index."""
    read = layer_load.read_ranges
    layers: list[int] = []
    counter = itertools.count()

    def recorded(ranges: Sequence[LayerRange], files: dict[UnitKey, int], storage: object) -> None:
        index = next(counter)
        if before is not None:
            before(ranges, files, index)
        layers.append(index)
        read(ranges, files, storage)  # type: ignore[arg-type]

    monkeypatch.setattr(layer_load, "read_ranges", recorded)
    return layers


@pytest.mark.parametrize("name", ["tiny-qwen3-next", "tiny-swa", "tiny-llama"])
def test_a_hit_loaded_layer_by_layer_gives_the_tokens_computed_from_scratch(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, prompt, first = prefix_on_disk(preset(name), tmp_path / "disk")
    k = engine.paged.request("probe", prompt, 0, imported=False).max_hit_blocks
    files_before = set((tmp_path / "disk").glob("*.unit"))
    layers = record_reads(monkeypatch)
    (again,) = engine.generate([prompt], GREEDY)
    assert again.num_cached_tokens == k * SMALL.block_tokens
    assert list(again.token_ids) == list(first.token_ids)
    assert layers == list(range(engine.paged.layout.num_layers))  # one step per layer, in order
    assert files_before - set((tmp_path / "disk").glob("*.unit"))  # loaded units leave the disk


def test_layer_0_computes_before_the_reader_has_read_the_last_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, prompt, first = prefix_on_disk(preset("tiny-qwen3-next"), tmp_path / "disk")
    last = engine.paged.layout.num_layers - 1
    order: list[str] = []
    layer_0_done = threading.Event()

    def hold_the_last_layer(_: object, __: object, index: int) -> None:
        if index == last:  # the reader slowed: the last layer waits for layer 0's compute
            layer_0_done.wait(timeout=120)
            order.append("read last layer")

    def computed(*_: object) -> None:
        if not layer_0_done.is_set():
            order.append("layer 0 computed")
            layer_0_done.set()

    record_reads(monkeypatch, hold_the_last_layer)
    handle = decoder_layers(engine.model.model)[0].register_forward_hook(computed)
    try:
        (again,) = engine.generate([prompt], GREEDY)
    finally:
        handle.remove()
    assert order == ["layer 0 computed", "read last layer"]
    assert list(again.token_ids) == list(first.token_ids)


def tear_before_layer_1(monkeypatch: pytest.MonkeyPatch, disk: FileTierStorage) -> list[UnitKey]:
    """Once the reader has read layer 0, cut every unit it is loading short; returns them."""
    loading: list[UnitKey] = []

    def tear(_: object, files: dict[UnitKey, int], index: int) -> None:
        if index == 1:
            loading.extend(files)
            for key in files:
                path = disk.path_of(key)
                path.write_bytes(path.read_bytes()[:16])

    record_reads(monkeypatch, tear)
    return loading


def test_a_unit_file_torn_mid_read_is_the_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, prompt, _ = prefix_on_disk(preset("tiny-llama"), tmp_path / "disk")
    disk = engine.paged.disk
    assert disk is not None
    loading = tear_before_layer_1(monkeypatch, disk)
    with pytest.raises(CacheMisuseError, match="torn"):
        engine.generate([prompt], GREEDY)
    assert loading
    assert not any(disk.path_of(key).exists() for key in loading)  # no longer on disk


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3-next"])
def test_a_failed_load_frees_its_pages_and_uncaches_its_units(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, prompt, first = prefix_on_disk(preset(name), tmp_path / "disk")
    assert engine.paged.disk is not None
    cache = engine.paged.pool
    pool_id = cache.instance_id
    probe = engine.paged.request("probe", prompt, 0, imported=False)
    dram_hit = cache.dram_match(probe).hit_blocks
    cache.take_events()
    loading = tear_before_layer_1(monkeypatch, engine.paged.disk)
    with pytest.raises(CacheMisuseError, match="torn"):
        engine.generate([prompt], GREEDY)
    assert loading
    # The failed request holds nothing: every live block is an unreferenced cached one.
    stats, pool = cache.stats(), cache.pool
    assert stats.num_requests == 0
    assert all(info.ref_count == 0 and info.block_hash is not None for info in pool.blocks())
    assert stats.num_free_pages + stats.num_evictable_pages == stats.num_pages
    # Its units left the prefix cache as an eviction does, and went nowhere else.
    assert not any(block_hash in pool.cached_blocks(g) for g, block_hash in loading)
    assert not any(pool.lower_holds(g, block_hash) for g, block_hash in loading)
    last = {(e.group_index, e.block_hash): e for e in cache.take_events()}
    assert all(last[key] == BlockRemoved(pool_id, *key, Medium.DRAM) for key in loading)
    assert cache.match(probe).hit_blocks == dram_hit  # the failed units are no hit
    engine.cancel("gen-0")  # the refused request, as the instance drops it
    monkeypatch.undo()
    (again,) = engine.generate([prompt], GREEDY)
    assert again.num_cached_tokens == dram_hit * SMALL.block_tokens
    assert list(again.token_ids) == list(first.token_ids)


_LAYOUT = Engine(preset("tiny-qwen3-next"), SMALL).paged.layout


@settings(max_examples=25, deadline=None)
@given(data=st.data(), page_bytes=st.sampled_from([256, 1000, 4096]))
def test_every_layer_installs_the_bytes_demoted_for_it(
    data: st.DataObject, page_bytes: int
) -> None:
    groups = data.draw(st.lists(st.integers(0, len(_LAYOUT.groups) - 1), min_size=1, max_size=4))
    sizes = [_LAYOUT.groups[g].unit_bytes for g in groups]
    per_unit = [-(-size // page_bytes) for size in sizes]
    order = data.draw(st.permutations(range(sum(per_unit) + 2)))  # scattered pages, 2 spare
    storage = TorchPageStorage(len(order), page_bytes)
    cuts = list(itertools.accumulate(per_unit, initial=0))
    with tempfile.TemporaryDirectory() as directory:
        disk = FileTierStorage(Path(directory))
        loads, demoted = [], {}
        for i, (group, size) in enumerate(zip(groups, sizes, strict=True)):
            key = (group, BlockHash(i))
            demoted[key] = random.Random(data.draw(st.integers(0, 2**32))).randbytes(size)
            disk.put(key, demoted[key])
            pages = tuple(PageId(p) for p in order[cuts[i] : cuts[i + 1]])
            loads.append(Promoted(key, pages))
        loader = LayerLoader(_LAYOUT, storage, disk, loads)
        for layer in range(_LAYOUT.num_layers):
            loader.wait(layer)
        loader.close()
        assert disk.num_units() == 0
    installed = {key: 0 for key in demoted}
    for ranges in layer_ranges(_LAYOUT, loads):
        for item in ranges:
            got = storage.gather_range([item.pages], item.start, item.stop)
            assert got.numpy().tobytes() == demoted[item.key][item.start : item.stop]
            installed[item.key] += item.stop - item.start
    assert installed == {key: len(raw) for key, raw in demoted.items()}
    spare = [PageId(p) for p in order[cuts[-1] :]]
    assert not storage.gather_units([spare]).any()  # nothing written outside the units
