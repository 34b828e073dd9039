"""The OpenAI edge: strict request parsing with the right error class, and response shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.serve.edge.openai_api import (
    MAX_TOKENS_LIMIT,
    SEED_MAX,
    SEED_MIN,
    ChatCompletionRequest,
    CompletionRequest,
    choice,
    envelope,
    parse_body,
    usage,
)
from prfaas.serve.errors import BadRequestError, PayloadTooLargeError, ServeError
from prfaas.serve.protocol import transcript
from prfaas.serve.router.completions import nth_seed

LIMIT = 10_000


def _raw(**fields: Any) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


def test_a_completion_with_defaults() -> None:
    req = parse_body(_raw(prompt="hi"), CompletionRequest, LIMIT)
    assert (req.prompts, req.max_tokens, req.temperature, req.stream, req.stops) == (
        ["hi"],
        None,
        1.0,
        False,
        [],
    )
    assert not req.include_usage


def test_options_are_read() -> None:
    raw = _raw(
        prompt=["one prompt"],
        max_tokens=7,
        temperature=0,
        seed=3,
        stop="\n",
        stream=True,
        stream_options={"include_usage": True},
        ignore_eos=True,
        user="someone",  # options nobody defines are ignored, as OpenAI-compatible servers do
    )
    req = parse_body(raw, CompletionRequest, LIMIT)
    assert (req.prompts, req.max_tokens, req.seed, req.stops) == (["one prompt"], 7, 3, ["\n"])
    assert req.stream and req.include_usage and req.ignore_eos
    assert parse_body(_raw(prompt="x", stop=["a", "b"]), CompletionRequest, LIMIT).stops == [
        "a",
        "b",
    ]


def test_chat_goes_to_the_instance_as_sent_and_max_completion_tokens() -> None:
    messages = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]},
    ]
    raw = _raw(messages=messages, max_completion_tokens=4, chat_template_kwargs={"x": 1})
    req = parse_body(raw, ChatCompletionRequest, LIMIT)
    assert req.chat.model_dump(exclude_none=True)["messages"] == messages
    assert req.chat.switches_asked == ["chat_template_kwargs"]
    assert req.max_completion_tokens == 4
    # a backend without a chat template prefills a plain transcript
    assert transcript(req.chat.messages) == "system: be brief\nuser: hi\nassistant:"
    plain = parse_body(_raw(messages=messages), ChatCompletionRequest, LIMIT)
    assert plain.chat.switches_asked == [] and plain.chat.add_generation_prompt


@pytest.mark.parametrize(
    ("raw", "kind", "message"),
    [
        (b"{not json", CompletionRequest, "the body is not valid JSON"),
        (b"\xff\xfe", CompletionRequest, "the body is not valid UTF-8"),
        (b"[1, 2]", CompletionRequest, "the body must be a JSON object"),
        (json.dumps({"prompt": "x"}).encode(), CompletionRequest, "model: Field required"),
        (_raw(), CompletionRequest, "prompt: Field required"),
        (_raw(prompt=5), CompletionRequest, "prompt: the prompt must be a string, a list of"),
        (_raw(prompt=["a", [1]]), CompletionRequest, "prompt: the prompt must be a string"),
        (_raw(prompt=[True]), CompletionRequest, "prompt: the prompt must be a string"),
        (_raw(prompt=[]), CompletionRequest, "prompt: the prompt is empty"),
        (_raw(prompt=["a", ""]), CompletionRequest, "prompt: prompt 1 is empty"),
        (_raw(prompt=[[1], []]), CompletionRequest, "prompt: prompt 1 is empty"),
        (_raw(prompt=[1, -2]), CompletionRequest, "prompt 0: token ids are integers in"),
        (_raw(prompt=[[2**31]]), CompletionRequest, "prompt 0: token ids are integers in"),
        (_raw(prompt=["a"] * 65, n=2), CompletionRequest, "65 prompts x n 2 is more than 128"),
        (_raw(prompt=""), CompletionRequest, "the prompt is empty"),
        (_raw(prompt="x", max_tokens="16"), CompletionRequest, "max_tokens: Input should be"),
        (_raw(prompt="x", max_tokens=0), CompletionRequest, "max_tokens: Input should be"),
        (_raw(prompt="x", max_tokens=-1), CompletionRequest, "max_tokens: Input should be"),
        (
            _raw(prompt="x", max_tokens=MAX_TOKENS_LIMIT + 1),
            CompletionRequest,
            "max_tokens: Input should be less than or equal to 1000000",
        ),
        (_raw(prompt="x", temperature=3), CompletionRequest, "temperature"),
        (_raw(prompt="x", top_p=0), CompletionRequest, "top_p"),
        (_raw(prompt="x", n=0), CompletionRequest, "n: Input should be greater than or equal to 1"),
        (
            _raw(prompt="x", n=129),
            CompletionRequest,
            "n: Input should be less than or equal to 128",
        ),
        (_raw(prompt="x", stream="yes"), CompletionRequest, "stream: Input should be"),
        (_raw(messages=[]), ChatCompletionRequest, "messages: List should have at least 1"),
        (
            _raw(messages=[{"role": "user", "content": "x"}], continue_final_message=True),
            ChatCompletionRequest,
            "add_generation_prompt and continue_final_message exclude each other",
        ),
        (
            _raw(messages=[{"role": "tool", "content": "x"}]),
            ChatCompletionRequest,
            "messages.0.role: Input should be 'system', 'developer', 'user' or 'assistant'",
        ),
        (
            _raw(messages=[{"role": "user", "content": 1}]),
            ChatCompletionRequest,
            "messages.0.content.str: Input should be a valid string",
        ),
    ],
)
def test_bad_bodies_are_400_naming_the_field(
    raw: bytes, kind: type[CompletionRequest | ChatCompletionRequest], message: str
) -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_body(raw, kind, LIMIT)
    assert message in str(caught.value)
    body = caught.value.body()["error"]
    assert (caught.value.status_code, body["type"]) == (400, "invalid_request_error")


@pytest.mark.parametrize("kind", [CompletionRequest, ChatCompletionRequest])
@pytest.mark.parametrize(
    ("options", "stream", "message"),
    [
        ({"include_usage": "false"}, True, "stream_options.include_usage: Input should be a"),
        ({"include_usage": 1}, True, "stream_options.include_usage: Input should be a"),
        ({"continuous_usage_stats": "true"}, True, "stream_options.continuous_usage_stats:"),
        ("include_usage", True, "stream_options: Input should be a valid dictionary"),
        ([True], True, "stream_options: Input should be a valid dictionary"),
        ({"include_usage": True}, False, "stream_options: only allowed with stream: true"),
    ],
)
def test_stream_options_take_booleans_and_a_stream(
    kind: type[CompletionRequest | ChatCompletionRequest], options: Any, stream: bool, message: str
) -> None:
    """Issue 26: `"include_usage": "false"` was taken (a truthy string: usage was sent)."""
    raw = _raw(prompt="x", messages=[{"role": "user", "content": "x"}], stream=stream)
    body = {**json.loads(raw), "stream_options": options}
    with pytest.raises(BadRequestError, match=message) as caught:
        parse_body(json.dumps(body).encode(), kind, LIMIT)
    assert caught.value.body()["error"]["param"] == "stream_options"


@pytest.mark.parametrize(
    ("options", "usage", "continuous"),
    [
        (None, False, False),
        ({}, False, False),
        ({"include_usage": None, "continuous_usage_stats": None}, False, False),
        ({"include_usage": False, "continuous_usage_stats": True}, False, False),
        ({"include_usage": True, "include_obfuscation": False, "x": [1]}, True, False),
        ({"include_usage": True, "continuous_usage_stats": True}, True, True),
    ],
)
def test_stream_options_unknown_keys_are_ignored_as_vllm_does(
    options: Any, usage: bool, continuous: bool
) -> None:
    req = parse_body(
        _raw(prompt="x", stream=True, stream_options=options), CompletionRequest, LIMIT
    )
    assert (req.include_usage, req.continuous_usage) == (usage, continuous)


def test_an_oversized_body_is_413_before_it_is_parsed() -> None:
    with pytest.raises(PayloadTooLargeError) as caught:
        parse_body(b"x" * (LIMIT + 1), CompletionRequest, LIMIT)
    assert caught.value.status_code == 413
    assert isinstance(caught.value, ServeError)


def test_response_shapes() -> None:
    assert usage(3, 4) == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert choice(False, "a", "eos", delta=False) == {
        "index": 0,
        "text": "a",
        "finish_reason": "stop",
        "logprobs": None,
    }
    chat = choice(True, "b", "length", delta=True)
    assert chat["delta"] == {"role": "assistant", "content": "b"}
    assert chat["finish_reason"] == "length"
    assert choice(True, "c", None, delta=False)["message"]["content"] == "c"
    body = envelope(True, "cmpl-1", "m", chunk=True, choices=[])
    assert (body["id"], body["object"], body["model"], body["choices"]) == (
        "cmpl-1",
        "chat.completion.chunk",
        "m",
        [],
    )
    assert envelope(False, "cmpl-2", "m", chunk=True)["object"] == "text_completion"
    assert envelope(True, "cmpl-3", "m", chunk=False)["object"] == "chat.completion"


_TEXT = st.text(min_size=1, max_size=8)
_IDS = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=8)


@given(
    prompt=_TEXT | _IDS | st.lists(_TEXT, min_size=1, max_size=6) | st.lists(_IDS, min_size=1),
    n=st.integers(1, 4),
)
def test_every_prompt_shape_gives_its_prompts_in_order(prompt: Any, n: int) -> None:
    req = parse_body(_raw(prompt=prompt, n=n), CompletionRequest, LIMIT)
    single = isinstance(prompt, str) or all(isinstance(t, int) for t in prompt)
    assert req.prompts == ([prompt] if single else prompt)
    assert req.n == n


@given(seed=st.integers(SEED_MIN, SEED_MAX), samples=st.integers(1, 8))
def test_samples_get_distinct_seeds_in_the_signed_64_bit_range(seed: int, samples: int) -> None:
    seeds = [nth_seed(seed, k) for k in range(samples)]
    assert seeds[0] == seed
    assert len(set(seeds)) == samples
    assert all(SEED_MIN <= s <= SEED_MAX for s in seeds)
