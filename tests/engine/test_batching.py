"""Continuous batching: batched decode equals one-at-a-time, requests join and leave between
steps, sampling is per request, and a full pool makes requests wait instead of failing."""

from __future__ import annotations

import pytest
from engine_helpers import SMALL, SYSTEM, preset, prompt_ids

from prfaas.engine import (
    BadRequestError,
    Engine,
    EngineConfig,
    FinishReason,
    LoadedModel,
    SamplingParams,
    TokenEvent,
)

TEXTS = ["Short.", SYSTEM + "A much longer prompt than the others.", "Mid length prompt."]


def test_batched_decode_equals_one_at_a_time(model: LoadedModel) -> None:
    prompts = [prompt_ids(model, t) for t in TEXTS]
    params = SamplingParams(max_tokens=6)
    alone = [Engine(model, SMALL).generate([p], params)[0].token_ids for p in prompts]
    together = Engine(model, SMALL).generate(prompts, params)
    assert [c.token_ids for c in together] == alone


def test_requests_join_and_leave_between_steps() -> None:
    model = preset("tiny-swa")
    engine = Engine(model, EngineConfig(block_tokens=8, max_batch_size=2, num_pages=256))
    prompts = [prompt_ids(model, t) for t in [*TEXTS, "Fourth."]]
    lengths = [3, 7, 2, 5]
    expected = [
        Engine(model, SMALL).generate([p], SamplingParams(max_tokens=n))[0].token_ids
        for p, n in zip(prompts, lengths, strict=True)
    ]
    for i, (p, n) in enumerate(zip(prompts, lengths, strict=True)):
        engine.submit(f"r{i}", p, SamplingParams(max_tokens=n))
    sizes = []
    finished = {}
    while engine.has_work:
        for completion in engine.step():
            finished[completion.request_id] = completion.token_ids
        sizes.append(engine.num_running)
    assert max(sizes) == 2
    assert [finished[f"r{i}"] for i in range(4)] == expected


def test_a_full_pool_makes_requests_wait_until_pages_free() -> None:
    model = preset("tiny-qwen3-next")
    probe = Engine(model, SMALL)
    prompts = [prompt_ids(model, f"{i} {SYSTEM}") for i in range(3)]  # nothing shared
    params = SamplingParams(max_tokens=4)
    plan = probe.paged.pool.plan(probe.paged.request("x", prompts[0], 4, imported=False))
    engine = Engine(model, EngineConfig(block_tokens=8, num_pages=plan.num_pages * 3 // 2))
    for i, prompt in enumerate(prompts):
        engine.submit(f"r{i}", prompt, params)
    engine.step()
    assert (engine.num_running, engine.num_waiting) == (1, 2)
    done = engine.run()
    assert sorted(c.request_id for c in done) == ["r0", "r1", "r2"]
    with pytest.raises(BadRequestError, match="pages"):
        engine.submit("huge", prompts[0] * 3, params)


def test_sampling_is_seeded_per_request_and_streams_in_order() -> None:
    model = preset("tiny-llama")
    prompt = prompt_ids(model, "Sample me.")
    params = SamplingParams(max_tokens=6, temperature=0.9, top_p=0.9, top_k=50, seed=7)
    alone = Engine(model, SMALL).generate([prompt], params)[0].token_ids
    events: list[TokenEvent] = []
    engine = Engine(model, SMALL)
    engine.submit("a", prompt, params, events.append)
    engine.submit("b", prompt_ids(model, "Other."), SamplingParams(max_tokens=6, seed=1))
    results = {c.request_id: c for c in engine.run()}
    assert results["a"].token_ids == alone
    assert [e.index for e in events] == list(range(6))
    assert tuple(e.token_id for e in events) == alone


def test_stop_strings_and_bad_requests() -> None:
    model = preset("tiny-llama")
    prompt = prompt_ids(model, "Stop.")
    free = Engine(model, SMALL).generate([prompt], SamplingParams(max_tokens=8))[0]
    stop = free.text[2:4]
    stopped = Engine(model, SMALL).generate([prompt], SamplingParams(max_tokens=8, stop=(stop,)))
    assert stopped[0].finish_reason is FinishReason.STOP
    assert stopped[0].text == free.text[: free.text.find(stop)]
    engine = Engine(model, SMALL)
    with pytest.raises(BadRequestError, match="empty"):
        engine.submit("e", [], SamplingParams())
    with pytest.raises(BadRequestError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(BadRequestError, match="context"):
        engine.submit("long", [1] * 4090, SamplingParams(max_tokens=10))
