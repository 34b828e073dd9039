"""The pool-backed cache: cold and prefix-hit generation agree with transformers, resumed
prefill matches a cold one, and a hit never comes without its state (attention KV restored
without it gives wrong output)."""

from __future__ import annotations

import torch
from engine_helpers import SMALL, SYSTEM, hf_greedy, prompt_ids

from prfaas.engine import Engine, EngineConfig, LoadedModel, SamplingParams

GREEDY = SamplingParams(max_tokens=8)


def test_cold_and_prefix_hit_generation_match_transformers(model: LoadedModel) -> None:
    engine = Engine(model, SMALL)
    first = prompt_ids(model, SYSTEM + "What is a block?")
    second = prompt_ids(model, SYSTEM + "What is a page?")
    cold = engine.generate([first], GREEDY)[0]
    warm = engine.generate([second], GREEDY)[0]
    assert list(cold.token_ids) == hf_greedy(model, first, 8)
    assert list(warm.token_ids) == hf_greedy(model, second, 8)
    assert cold.num_cached_tokens == 0
    # <bos> + system prompt + "What is a " = 56 shared tokens = 7 blocks, and the first
    # request left its request-end snapshot at block (62 - 1) // 8 = 7
    assert len(first) == 62
    assert warm.num_cached_tokens == 56


def test_resumed_prefill_logits_match_a_cold_prefill(model: LoadedModel) -> None:
    prompt = prompt_ids(model, SYSTEM + "Tell me about prefix caching.")
    cold = Engine(model, SMALL).prefill("cold", prompt, GREEDY)
    engine = Engine(model, SMALL)
    engine.generate([prompt[:-3]], SamplingParams(max_tokens=1))
    warm = engine.prefill("warm", prompt, GREEDY)
    assert cold is not None and warm is not None
    assert warm.hit_tokens > 0
    assert torch.allclose(warm.last_logits, cold.last_logits, atol=1e-4, rtol=0)


def test_chunk_size_does_not_change_the_result(model: LoadedModel) -> None:
    prompt = prompt_ids(model, SYSTEM + "Chunks of the prompt.")
    whole = Engine(model, EngineConfig(block_tokens=8, chunk_tokens=512, num_pages=512))
    small = Engine(model, EngineConfig(block_tokens=8, chunk_tokens=5, num_pages=512))
    a, b = whole.prefill("a", prompt, GREEDY), small.prefill("b", prompt, GREEDY)
    assert a is not None and b is not None
    assert torch.allclose(a.last_logits, b.last_logits, atol=1e-4, rtol=0)


def test_shared_attention_blocks_without_a_state_boundary_are_no_hit(
    hybrid_model: LoadedModel,
) -> None:
    """The first prompt leaves a snapshot only at its own end (boundary 5); the second shares
    its first 3 blocks of attention KV but no state at boundary 3, so it must not hit."""
    engine = Engine(hybrid_model, SMALL)
    first = prompt_ids(hybrid_model, SYSTEM + "abcdefghijk")
    second = first[:24] + prompt_ids(hybrid_model, "zz different tail here")[1:]
    engine.generate([first], GREEDY)
    probe = engine.paged.request("probe", second, 8, imported=False)
    match = engine.paged.pool.match(probe)
    assert (match.attention_blocks, match.hit_blocks) == (3, 0)
    result = engine.generate([second], GREEDY)[0]
    assert result.num_cached_tokens == 0
    assert list(result.token_ids) == hf_greedy(hybrid_model, second, 8)
    # the second request left a snapshot at the junction (block 3): a third prompt sharing
    # those blocks now hits them with their state
    third = first[:24] + prompt_ids(hybrid_model, "yet another tail")[1:]
    hit = engine.generate([third], GREEDY)[0]
    assert hit.num_cached_tokens == 24
    assert list(hit.token_ids) == hf_greedy(hybrid_model, third, 8)


def test_a_dense_model_hits_on_attention_blocks_alone() -> None:
    from engine_helpers import preset

    model = preset("tiny-llama")
    engine = Engine(model, SMALL)
    first = prompt_ids(model, SYSTEM + "abcdefghijk")
    second = first[:24] + prompt_ids(model, "zz different tail here")[1:]
    engine.generate([first], GREEDY)
    assert engine.generate([second], GREEDY)[0].num_cached_tokens == 24
