"""Cross-cluster prefix moves at the pool level: export the restorable prefix on A, import it
on B, and B's next prefill restores it and gives the same tokens as a cold run."""

from __future__ import annotations

import pytest
from engine_helpers import CORE_NAMES, SMALL, SYSTEM, hf_greedy, preset, prompt_ids

from prfaas.engine import CacheImportError, Engine, LoadedModel, SamplingParams
from prfaas.engine.prefix_move import PrefixExport, PrefixRecord

GREEDY = SamplingParams(max_tokens=6)


def _warm(model: LoadedModel, prompt: list[int]) -> Engine:
    a = Engine(model, SMALL)
    a.generate([prompt], GREEDY)
    return a


@pytest.mark.parametrize("name", CORE_NAMES)
def test_a_moved_prefix_is_hit_and_gives_the_cold_tokens(name: str) -> None:
    """Hybrid models and a dense one (no state group: a move is attention blocks only)."""
    model = preset(name)
    prompt = prompt_ids(model, SYSTEM + "Move my prefix to the other cluster.")
    a, b = _warm(model, prompt), Engine(model, SMALL)
    export = a.export_prefix(prompt)
    assert export is not None
    k = (len(prompt) - 1) // SMALL.block_tokens
    assert export.num_blocks == k and len(export.tokens) == k * SMALL.block_tokens
    assert b.import_prefix(export) == k
    assert b.import_prefix(export, "again") == k  # idempotent: already restorable
    probe = b.paged.request("probe", prompt, 0, imported=False)
    assert b.paged.pool.match(probe).hit_tokens == k * SMALL.block_tokens
    (completion,) = b.generate([prompt], GREEDY)
    assert completion.num_cached_tokens == k * SMALL.block_tokens
    assert list(completion.token_ids) == hf_greedy(model, prompt, 6)
    # bit for bit: every unit B holds for the prefix equals A's
    ids_a = a.paged.pool.match(probe)
    ids_b = b.paged.pool.match(probe)
    for group_a, group_b in zip(ids_a.attention_block_ids, ids_b.attention_block_ids, strict=True):
        for block_a, block_b in zip(group_a[:k], group_b[:k], strict=True):
            assert a.paged.pool.read_block(block_a) == b.paged.pool.read_block(block_b)
    for snap_a, snap_b in zip(ids_a.snapshot_ids, ids_b.snapshot_ids, strict=True):
        assert a.paged.pool.read_block(snap_a) == b.paged.pool.read_block(snap_b)


def test_a_shared_prefix_moves_for_a_longer_prompt() -> None:
    """The holder served `prompt`; the target gets a longer prompt sharing it: the move
    carries the holder's deepest snapshot boundary, the target computes only the rest."""
    model = preset("tiny-qwen3-next")
    prompt = prompt_ids(model, SYSTEM + "A shared system prompt, then a question.")
    longer = prompt + prompt_ids(model, " And a follow-up.")[1:]
    a, b = _warm(model, prompt), Engine(model, SMALL)
    export = a.export_prefix(longer)
    k = (len(prompt) - 1) // SMALL.block_tokens
    assert export is not None and export.num_blocks == k
    assert a.export_prefix(longer, max_tokens=k * SMALL.block_tokens - 1) is None  # no snapshot
    assert b.import_prefix(export) == k
    (completion,) = b.generate([longer], GREEDY)
    assert completion.num_cached_tokens == k * SMALL.block_tokens
    assert list(completion.token_ids) == hf_greedy(model, longer, 6)


def test_nothing_to_move_and_mismatched_exports() -> None:
    model = preset("tiny-qwen3-next")
    a = Engine(model, SMALL)
    prompt = prompt_ids(model, SYSTEM + "Never prefilled here.")
    assert a.export_prefix(prompt) is None
    warm = _warm(model, prompt)
    export = warm.export_prefix(prompt)
    assert export is not None
    short = PrefixExport(export.tokens[:-1], export.num_blocks, export.records)
    with pytest.raises(CacheImportError):
        a.import_prefix(short)
    first = export.records[0]
    torn = PrefixRecord(first.group_index, first.is_attention, first.num_rows, first.data[:-1])
    with pytest.raises(CacheImportError):
        a.import_prefix(PrefixExport(export.tokens, export.num_blocks, (torn, *export.records[1:])))
