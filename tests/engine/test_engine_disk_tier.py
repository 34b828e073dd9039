"""The torch engine's disk tier: a prefix the pool evicts is kept on local disk, served from
there with the tokens it gave when computed, and cleared by a cold restart (as documented)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import (
    GREEDY,
    SMALL,
    SYSTEM,
    cached_pages,
    prefix_on_disk,
    preset,
    prompt_ids,
    tiered_engine,
)

from prfaas.engine.disk_tier import FileTierStorage
from prfaas.kvcache import BlockHash, CacheMisuseError


@pytest.mark.parametrize("name", ["tiny-qwen3-next", "tiny-llama"])
def test_an_evicted_prefix_is_served_from_disk_with_the_same_tokens(
    name: str, tmp_path: Path
) -> None:
    model = preset(name)
    engine, prompt, first = prefix_on_disk(model, tmp_path / "disk")
    k = engine.paged.request("probe", prompt, 0, imported=False).max_hit_blocks
    pool = engine.paged.pool
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


def test_a_full_disk_loses_the_evicted_prefix_not_the_requests(full_disk: Path) -> None:
    model = preset("tiny-qwen3-next")
    prompt = prompt_ids(model, SYSTEM + "Keep this prefix on disk for me, please.")
    engine = tiered_engine(model, 2 * cached_pages(model, prompt), full_disk)
    (first,) = engine.generate([prompt], GREEDY)
    for i in range(8):  # push the prompt out of DRAM; every demotion write fails
        engine.generate([prompt_ids(model, f"Unrelated question {i}: what is {i} + {i}?")], GREEDY)
    pool = engine.paged.pool
    assert pool.tier_counters.failed_demotions > 0
    # What the tier believes it holds is exactly what is on the disk; no partial file left.
    assert pool.pool.lower is not None
    assert pool.pool.lower.num_units == len(list(full_disk.glob("*.unit")))
    assert not any(full_disk.glob("*.tmp"))
    (again,) = engine.generate([prompt], GREEDY)  # computed afresh where its KV was lost
    assert list(again.token_ids) == list(first.token_ids)
