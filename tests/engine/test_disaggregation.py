"""Prefill on A, export layer by layer, bytes, import on B, decode on B (only what B lacks
travels)."""

from __future__ import annotations

import torch
from engine_helpers import SMALL, SYSTEM, hf_greedy, prompt_ids

from prfaas.engine import Engine, ExportedPrefill, LoadedModel, SamplingParams
from prfaas.engine.cache_layout import LayerKind
from prfaas.kvcache import KvSlice

GREEDY = SamplingParams(max_tokens=8)


def _handoff(a: Engine, b: Engine, prompt: list[int], request_id: str) -> ExportedPrefill:
    exported = a.export_prefill(request_id, prompt, GREEDY, b.cached_prefix_tokens(prompt))
    assert exported is not None
    return ExportedPrefill.from_bytes(exported.to_bytes())


def test_disaggregated_decode_matches_transformers(model: LoadedModel) -> None:
    a, b = Engine(model, SMALL), Engine(model, SMALL)
    prompt = prompt_ids(model, SYSTEM + "Disaggregate me.")
    b.submit_import(_handoff(a, b, prompt, "r1"), GREEDY)
    (completion,) = b.run()
    assert list(completion.token_ids) == hf_greedy(model, prompt, 8)


def test_the_receiver_gets_bit_exact_blocks_and_only_what_it_lacks(model: LoadedModel) -> None:
    a, b = Engine(model, SMALL), Engine(model, SMALL)
    first = prompt_ids(model, SYSTEM + "First question?")
    b.submit_import(_handoff(a, b, first, "r1"), GREEDY)
    b.run()
    second = first[:40] + prompt_ids(model, "Second one, longer tail.")[1:]
    assert b.cached_prefix_tokens(second) == 40
    exported = _handoff(a, b, second, "r2")
    full = [r for r in exported.records if r.token_start != r.token_end]
    assert full and all((r.token_start, r.token_end) == (40, len(second)) for r in full)
    states = [r for r in exported.records if r.token_start == r.token_end]
    assert all(r.token_end == len(second) for r in states)
    b.submit_import(exported, GREEDY)
    (completion,) = b.run()
    assert list(completion.token_ids) == hf_greedy(model, second, 8)
    probe = a.paged.request("probe", second, 0, imported=True)
    for pool_a, pool_b in [(a.paged.pool, b.paged.pool)]:
        ids_a = pool_a.match(probe).attention_block_ids
        ids_b = pool_b.match(probe).attention_block_ids
        assert len(ids_a[0]) == len(ids_b[0]) == (len(second) - 1) // 8
        for group_a, group_b in zip(ids_a, ids_b, strict=True):
            for block_a, block_b in zip(group_a, group_b, strict=True):
                assert pool_a.read_block(block_a) == pool_b.read_block(block_b)


def test_records_arrive_layer_by_layer_with_transfer_metadata() -> None:
    from engine_helpers import preset

    model = preset("tiny-qwen3-next")
    engine = Engine(model, SMALL)
    prompt = prompt_ids(model, SYSTEM + "Layers.")
    exported = engine.export_prefill("r", prompt, GREEDY, from_token=16)
    assert exported is not None
    assert [r.layer_index for r in exported.records] == [0, 1, 2, 3]
    n = len(prompt)
    groups = engine.paged.layout.groups
    by_kind = {groups[r.group_index].kind: r for r in exported.records}
    gqa: KvSlice = by_kind[LayerKind.FULL]
    assert (gqa.token_start, gqa.token_end, gqa.dtype) == (16, n, "float32")
    assert gqa.shape == (n - 16, 2 * 16 + 2 * 16)  # per token: 2 KV heads x 16, keys, values
    gdn = by_kind[LayerKind.LINEAR]
    assert (gdn.token_start, gdn.token_end, gdn.shape) == (n, n, (128 * 3 + 4 * 16 * 16,))
    assert gdn.nbytes == gdn.shape[0] * 4


def test_an_export_round_trips_through_bytes() -> None:
    record = KvSlice(3, 1, 8, 12, "float32", (4, 2), torch.arange(8.0).numpy().tobytes())
    exported = ExportedPrefill("r", (1, 2, 3), 7, (record, record))
    assert ExportedPrefill.from_bytes(exported.to_bytes()) == exported
