"""Real hybrid caches from the engine's presets, through the real Sender and Receiver over
loopback TCP: every exported tensor arrives bit for bit, with its dtype and shape, and a second
engine that imports what arrived decodes exactly what a local run of the same prompt decodes.

Synthetic caches of every group kind are covered by `test_transfer_contract.py`; this is the
same path with what `prfaas.engine` really exports for every hybrid family preset (fp32 GQA/MLA
KV over a token range, conv + recurrent / SSM / lightning states, SWA windows; two records for
a parallel hybrid layer), streamed layer by layer as `serve` does.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from transfer_helpers import run, running_pair

from prfaas.kvcache import KvSlice
from prfaas.transfer import RequestId, SliceKey, TcpTransport, TransferReceived

# The engine (and torch, only for the tensor comparison) come with the `engine` extra.
engine = pytest.importorskip("prfaas.engine")
torch = pytest.importorskip("torch")

#: Every preset with a state group: GDN, KDA + MLA, SWA, Mamba-1/2, short conv, lightning,
#: parallel hybrid layers, shared attention, MLP-only layers.
HYBRID_PRESETS = sorted(set(engine.PRESETS) - {"tiny-llama"})
SMALL = engine.EngineConfig(block_tokens=8, chunk_tokens=16, capacity_bytes=8 * 1024 * 1024)
CACHED_TOKENS = 16  # the receiver has two blocks: only the tail's KV travels
GREEDY = engine.SamplingParams(max_tokens=6)
PROMPT = "You are a careful assistant. Answer briefly. Ship this cache across the link."


@functools.cache
def _preset(name: str) -> Any:
    """Each preset built once per session (its weights are deterministic)."""
    return engine.build_preset(name)


def _key(record: Any) -> SliceKey:
    return SliceKey(record.layer_index, record.group_index, record.token_start, record.token_end)


def _tensor(data: bytes, dtype: str, shape: tuple[int, ...]) -> Any:
    return torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).reshape(shape)


async def _ship(records: list[Any], request_id: str) -> dict[SliceKey, Any]:
    """Send `records` layer by layer; return what the receiver committed, as records."""
    transport = TcpTransport()
    async with running_pair(transport, sink_bytes=32 * 1024 * 1024) as pair:
        transfer = await pair.sender.start_transfer(pair.address, RequestId(request_id))
        for record in records:
            await transfer.send_slice(_key(record), record.dtype, record.shape, record.data)
        await transfer.finish()
        (received,) = [e for e in pair.receiver.take_events() if isinstance(e, TransferReceived)]
        assert received.num_slices == len(records)
        return {
            key: KvSlice(
                key.layer, key.group, key.token_start, key.token_end, meta.dtype, meta.shape, data
            )
            for key, (meta, data) in pair.sink.committed(RequestId(request_id)).items()
        }


@pytest.mark.parametrize("name", HYBRID_PRESETS)
def test_engine_exports_cross_the_wire_bit_exact(name: str) -> None:
    model = _preset(name)
    prefill = engine.Engine(model, SMALL)
    prompt = model.tokenizer.encode_prompt(PROMPT, chat=False)
    exported = prefill.export_prefill("r", prompt, GREEDY, from_token=CACHED_TOKENS)
    assert exported is not None
    records = list(exported.records)
    is_state = {r.token_start == r.token_end for r in records}
    # every hybrid preset carries state; all but pure Mamba-2 attention KV too
    assert is_state == ({True} if name == "tiny-mamba2" else {True, False})

    arrived = run(_ship(records, "r"))

    assert set(arrived) == {_key(r) for r in records}
    for record in records:
        got = arrived[_key(record)]
        assert (got.dtype, got.shape) == (record.dtype, record.shape)
        assert got.data == record.data
        sent = _tensor(record.data, record.dtype, record.shape)
        assert torch.equal(_tensor(got.data, got.dtype, got.shape), sent)


@pytest.mark.parametrize("name", HYBRID_PRESETS)
def test_imported_cache_decodes_like_a_local_run(name: str) -> None:
    model = _preset(name)
    prompt = model.tokenizer.encode_prompt(PROMPT, chat=False)
    exported = engine.Engine(model, SMALL).export_prefill("r", prompt, GREEDY)
    assert exported is not None

    arrived = run(_ship(list(exported.records), "r"))

    records = tuple(arrived[_key(r)] for r in exported.records)
    decode = engine.Engine(model, SMALL)
    shipped = engine.ExportedPrefill("r", exported.prompt_tokens, exported.first_token, records)
    decode.submit_import(shipped, GREEDY)
    (imported,) = decode.run()
    (local,) = engine.Engine(model, SMALL).generate([prompt], GREEDY)
    assert imported.token_ids == local.token_ids
