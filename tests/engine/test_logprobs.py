"""Token logprobs: the log_softmax of the model's raw logits at each generated position
(before temperature, top-k and top-p, as vLLM's default), checked against a full forward pass
of transformers over prompt + generated tokens; the top alternatives best first; the first
token's logprob travels with a disaggregated prefill's export."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import SMALL, preset, prompt_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.engine import BadRequestError, Engine, SamplingParams, TokenEvent
from prfaas.engine.sampling import MIN_LOGPROB, TokenLogprob, token_logprob

MODEL = "tiny-llama"
PROMPT = "The logprobs of a random model"


def _reference(prompt: list[int], generated: list[int]) -> torch.Tensor:
    """log_softmax of transformers' logits at the positions that predicted `generated`."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = preset(MODEL).model(input_ids=ids).logits[0].float()
    steps = logits[len(prompt) - 1 : len(prompt) - 1 + len(generated)]
    return torch.log_softmax(steps, dim=-1)


def _run(params: SamplingParams) -> tuple[list[int], list[TokenEvent]]:
    engine = Engine(preset(MODEL), SMALL)
    prompt = prompt_ids(preset(MODEL), PROMPT)
    events: list[TokenEvent] = []
    engine.submit("r", prompt, params, events.append)
    engine.run()
    return prompt, events


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=6, logprobs=3),
        SamplingParams(max_tokens=6, logprobs=5, temperature=1.3, top_k=7, top_p=0.8, seed=4),
    ],
)
def test_each_token_gets_the_raw_logprob_of_the_model(params: SamplingParams) -> None:
    prompt, events = _run(params)
    generated = [e.token_id for e in events]
    reference = _reference(prompt, generated)
    for step, event in enumerate(events):
        got = event.logprob
        assert got is not None and got.token_id == event.token_id
        assert got.logprob == pytest.approx(float(reference[step, event.token_id]), abs=1e-4)
        assert len(got.top) == params.logprobs
        best = torch.topk(reference[step], len(got.top))
        assert [i for i, _ in got.top] == best.indices.tolist()
        assert [v for _, v in got.top] == pytest.approx(best.values.tolist(), abs=1e-4)
        if params.temperature == 0:  # greedy: the sampled token is the best one
            assert got.top[0][0] == event.token_id


def test_no_logprobs_unless_asked_and_zero_gives_the_token_only() -> None:
    _, events = _run(SamplingParams(max_tokens=3))
    assert all(e.logprob is None for e in events)
    _, events = _run(SamplingParams(max_tokens=3, logprobs=0))
    assert all(e.logprob is not None and e.logprob.top == () for e in events)


@pytest.mark.parametrize("logprobs", [-1, 21])
def test_logprobs_out_of_range_are_refused(logprobs: int) -> None:
    with pytest.raises(BadRequestError, match="logprobs"):
        SamplingParams(logprobs=logprobs)


def test_the_first_token_logprob_travels_with_the_export() -> None:
    params = SamplingParams(max_tokens=5, logprobs=2)
    prompt, colocated = _run(params)
    prefill = Engine(preset(MODEL), SMALL)
    exported = prefill.export_prefill("r", prompt, params)
    assert exported is not None and exported.first_logprob == colocated[0].logprob
    decode = Engine(preset(MODEL), SMALL)
    events: list[TokenEvent] = []
    decode.submit_import(exported, params, events.append)
    decode.run()
    assert [e.logprob for e in events] == [e.logprob for e in colocated]


@settings(max_examples=50, deadline=None)
@given(
    logits=st.lists(st.floats(-50, 50), min_size=2, max_size=40),
    num_top=st.integers(0, 20),
    data=st.data(),
)
def test_token_logprob_is_a_normalised_log_distribution(
    logits: list[float], num_top: int, data: st.DataObject
) -> None:
    token = data.draw(st.integers(0, len(logits) - 1))
    got: TokenLogprob = token_logprob(torch.tensor(logits), token, num_top)
    full = torch.log_softmax(torch.tensor(logits, dtype=torch.float32), dim=-1)
    assert got.logprob == pytest.approx(max(float(full[token]), MIN_LOGPROB), abs=1e-5)
    assert len(got.top) == min(num_top, len(logits))
    values = [v for _, v in got.top]
    assert values == sorted(values, reverse=True)
    assert all(MIN_LOGPROB <= v <= 0 for v in values)
