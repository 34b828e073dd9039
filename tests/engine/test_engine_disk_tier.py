"""The torch engine's disk tier: a prefix the pool evicts is kept on local disk, served from
there with the tokens it gave when computed, and cleared by a cold restart (as documented)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from engine_helpers import SMALL, SYSTEM, preset, prompt_ids

from prfaas.engine import Engine, LoadedModel, SamplingParams
from prfaas.engine.disk_tier import DiskTierConfig, FileTierStorage
from prfaas.kvcache import BlockHash, CacheMisuseError

GREEDY = SamplingParams(max_tokens=6)


def cached_pages(model: LoadedModel, prompt: list[int]) -> int:
    """Pages the prompt leaves cached in a pool large enough to keep everything."""
    engine = Engine(model, SMALL)
    engine.generate([prompt], GREEDY)
    return engine.paged.pool.stats().num_used_pages


def tiered_engine(model: LoadedModel, num_pages: int, directory: Path) -> Engine:
    disk = DiskTierConfig(directory, capacity_bytes=64 * 1024 * 1024)
    config = dataclasses.replace(SMALL, capacity_bytes=None, num_pages=num_pages, disk_tier=disk)
    return Engine(model, config)


@pytest.mark.parametrize("name", ["tiny-qwen3-next", "tiny-llama"])
def test_an_evicted_prefix_is_served_from_disk_with_the_same_tokens(
    name: str, tmp_path: Path
) -> None:
    model = preset(name)
    prompt = prompt_ids(model, SYSTEM + "Keep this prefix on disk for me, please.")
    others = [
        prompt_ids(model, f"Unrelated question number {i}: what is {i} + {i}?") for i in range(8)
    ]
    engine = tiered_engine(model, 2 * cached_pages(model, prompt), tmp_path / "disk")
    (first,) = engine.generate([prompt], GREEDY)
    probe = engine.paged.request("probe", prompt, 0, imported=False)
    k = probe.max_hit_blocks
    assert k
    pool = engine.paged.pool
    for other in others:  # push the prompt's units out of DRAM, onto disk
        engine.generate([other], GREEDY)
        if pool.dram_match(probe).hit_blocks < k:
            break
    assert pool.dram_match(probe).hit_blocks < k  # no longer whole in DRAM
    assert pool.match(probe).hit_blocks == k  # whole across DRAM and disk
    assert any((tmp_path / "disk").glob("*.unit"))
    (again,) = engine.generate([prompt], GREEDY)
    assert again.num_cached_tokens == k * SMALL.block_tokens
    assert list(again.token_ids) == list(first.token_ids)
    assert pool.tier_counters.promoted_bytes > 0

    # A cold restart on the same directory starts with an empty disk tier (docs/kvcache.md).
    restarted = tiered_engine(model, 2 * cached_pages(model, prompt), tmp_path / "disk")
    assert not any((tmp_path / "disk").glob("*.unit"))
    (cold,) = restarted.generate([prompt], GREEDY)
    assert cold.num_cached_tokens == 0
    assert list(cold.token_ids) == list(first.token_ids)


def test_the_disk_tier_clears_only_its_own_files_at_start(tmp_path: Path) -> None:
    kept = tmp_path / "notes.txt"
    kept.write_text("not ours")
    first = FileTierStorage(tmp_path)
    key = (0, BlockHash(0xABC))
    first.put(key, b"unit bytes")
    assert first.get(key) == b"unit bytes"
    assert first.path_of(key).name == "g0-0000000000000abc.unit"
    (tmp_path / "g1-0000000000000001.tmp").write_bytes(b"torn")  # a crash mid-write
    FileTierStorage(tmp_path)  # a restart
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    with pytest.raises(CacheMisuseError):
        first.get(key)
