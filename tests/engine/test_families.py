"""Every hybrid family on the engine, against transformers' own greedy `generate()`.

One tiny random-weight preset per family (fixed seed): Mamba/Mamba2 states (jamba, bamba,
granitemoehybrid, nemotron_h with MLP-only layers, mamba2), attention and Mamba2 in one layer
(falcon_h1), shared attention blocks (zamba, zamba2), short convolutions (lfm2), Gated
DeltaNet (olmo_hybrid), sliding windows (gemma3) and lightning attention (minimax). For a
45-token and a 600-token prompt, 16 greedy tokens must equal `generate(do_sample=False)`:
colocated, again after a prefix hit, disaggregated (export, bytes, import on a second engine)
and in a batch of four. Bit-exact transfer of the same exports over TCP is in
tests/transfer/test_engine_kv_round_trip.py.
"""

from __future__ import annotations

import functools

import pytest
from engine_helpers import hf_greedy, preset

from prfaas.engine import Engine, EngineConfig, ExportedPrefill, LoadedModel, SamplingParams
from prfaas.engine.tokenizer import BOS_ID

FAMILY_PRESETS = [
    "tiny-bamba",
    "tiny-falcon-h1",
    "tiny-gemma3",
    "tiny-granite-hybrid",
    "tiny-jamba",
    "tiny-lfm2",
    "tiny-mamba2",
    "tiny-minimax",
    "tiny-nemotron-h",
    "tiny-olmo-hybrid",
    "tiny-zamba",
    "tiny-zamba2",
]
CONFIG = EngineConfig(block_tokens=16, chunk_tokens=64, capacity_bytes=16 * 1024 * 1024)
GREEDY = SamplingParams(max_tokens=16)
_TEXT = (
    "The prefill cluster streams every layer's cache to the decode cluster across the link; "
    "hybrid models keep a fixed-size state per request beside the attention cache. "
)


def _prompt(num_tokens: int, salt: str = "") -> tuple[int, ...]:
    """BOS plus num_tokens - 1 bytes of deterministic text."""
    body = ((salt + _TEXT) * (num_tokens // len(_TEXT) + 2)).encode()
    return (BOS_ID, *body[: num_tokens - 1])


SHORT, LONG = _prompt(45), _prompt(600, "Long: ")


@functools.cache
def _reference(name: str, prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(hf_greedy(preset(name), prompt, GREEDY.max_tokens))


def _tokens(engine: Engine, prompt: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    (completion,) = engine.generate([prompt], GREEDY)
    return completion.token_ids, completion.num_cached_tokens


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_colocated_and_after_a_prefix_hit(name: str) -> None:
    engine = Engine(preset(name), CONFIG)
    for prompt in (SHORT, LONG):
        tokens, cached = _tokens(engine, prompt)
        assert (tokens, cached) == (_reference(name, prompt), 0)
        again, cached = _tokens(engine, prompt)
        assert cached > 0
        assert again == _reference(name, prompt)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_disaggregated(name: str) -> None:
    model: LoadedModel = preset(name)
    for prompt in (SHORT, LONG):
        prefill, decode = Engine(model, CONFIG), Engine(model, CONFIG)
        exported = prefill.export_prefill("r", prompt, GREEDY, decode.cached_prefix_tokens(prompt))
        assert exported is not None
        decode.submit_import(ExportedPrefill.from_bytes(exported.to_bytes()), GREEDY)
        (completion,) = decode.run()
        assert completion.token_ids == _reference(name, prompt)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_a_batch_of_four(name: str) -> None:
    prompts = [SHORT, LONG, _prompt(100, "Batched: "), _prompt(23, "Tiny: ")]
    completions = Engine(preset(name), CONFIG).generate(prompts, GREEDY)
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.token_ids == _reference(name, prompt)
