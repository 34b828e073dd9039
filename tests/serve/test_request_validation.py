"""Issue 14 item 1-2 at the parser: every value the engine cannot honour is a 400 naming the
field, every malformed body a 400, and nothing else ever escapes `parse_body`."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from prfaas.serve.edge.jsonbody import MAX_JSON_DEPTH, load_json
from prfaas.serve.edge.openai_api import (
    MAX_STOP_SEQUENCES,
    REFUSED,
    ChatCompletionRequest,
    CompletionRequest,
    parse_body,
)
from prfaas.serve.errors import BadRequestError, ServeError
from prfaas.serve.protocol import Sampling, transcript

LIMIT = 1_000_000


def _raw(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "prompt": "hi", **fields}).encode()


def _chat(messages: Any, **fields: Any) -> ChatCompletionRequest:
    raw = json.dumps({"model": "m", "messages": messages, **fields}).encode()
    return parse_body(raw, ChatCompletionRequest, LIMIT)


def _refused(raw: bytes, kind: type[CompletionRequest | ChatCompletionRequest]) -> ServeError:
    with pytest.raises(BadRequestError) as caught:
        parse_body(raw, kind, LIMIT)
    assert caught.value.status_code == 400
    return caught.value


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"seed": 2**64}, "seed"),
        ({"seed": 2**63}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"seed": -(2**64)}, "seed"),
        ({"temperature": -1e-300}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.0000001}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"top_k": 2**40}, "top_k"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
        ({"stop": ""}, "stop"),
        ({"stop": ["a", ""]}, "stop"),
        ({"stop": ["s"] * (MAX_STOP_SEQUENCES + 1)}, "stop"),
        ({"stop": "x" * 1001}, "stop"),
    ],
)
def test_out_of_range_parameters_are_400_naming_the_field(
    fields: dict[str, Any], param: str
) -> None:
    err = _refused(_raw(**fields), CompletionRequest)
    assert param in str(err)


def test_the_engine_limits_are_accepted_at_their_edges() -> None:
    for seed in (2**63 - 1, -(2**63), 0):
        assert parse_body(_raw(seed=seed), CompletionRequest, LIMIT).seed == seed
    req = parse_body(_raw(top_k=-1, temperature=2, top_p=1), CompletionRequest, LIMIT)
    assert req.sampling_top_k == 0


@pytest.mark.parametrize("temperature", [1e-45, 1e-300, 5e-324, 1e-320, 9.9e-6])
def test_tiny_temperatures_are_greedy(temperature: float) -> None:
    req = parse_body(_raw(temperature=temperature), CompletionRequest, LIMIT)
    assert req.sampling_temperature == 0.0
    assert parse_body(_raw(temperature=1e-5), CompletionRequest, LIMIT).sampling_temperature == 1e-5


@pytest.mark.parametrize("top_p", [1e-320, 5e-324, 1e-45])
def test_tiny_top_p_is_accepted(top_p: float) -> None:
    assert parse_body(_raw(top_p=top_p), CompletionRequest, LIMIT).top_p == top_p


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": "m", "prompt": "hi", "temperature": NaN}', "NaN is not a JSON number"),
        (b'{"model": "m", "prompt": "hi", "top_p": Infinity}', "Infinity is not a JSON number"),
        (b'{"model": "m", "prompt": "hi", "temperature": 1e999}', "out of range"),
        (b'{"model": "m", "prompt": "hi", "seed": ' + b"9" * 5000 + b"}", "4300 digits"),
        (b'{"model": "m", "prompt": "hi", "max_tokens": -' + b"1" * 4301 + b"}", "4300 digits"),
        (b'{"model": "m", "prompt": "hi\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "\\udfff"}]}', "surrogate"),
        (b'{"model": "m", "prompt": "hi", "x\\ud800": 1}', "surrogate"),
        (b'{"model": "m", "prompt": "\xed\xa0\x80"}', "not valid UTF-8"),
        (b'{"model": "m", "prompt": "\xc3"}', "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than"),
        (b'{"a": ' * 5000 + b"1" + b"}" * 5000, "nests deeper than"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),
    ],
)
def test_malformed_json_is_400(raw: bytes, message: str) -> None:
    err = _refused(raw, CompletionRequest)
    assert message in str(err)


def test_nesting_is_counted_outside_strings_only() -> None:
    deep_text = "[" * 1000
    assert load_json(json.dumps({"prompt": deep_text}).encode()) == {"prompt": deep_text}
    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert load_json(ok.encode()) is not None
    with pytest.raises(BadRequestError):
        load_json(("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)).encode())


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"echo": True}, "echo"),
        ({"best_of": 2}, "best_of"),
        ({"suffix": "tail"}, "suffix"),
        ({"logit_bias": {"42": 5}}, "logit_bias"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -1}, "frequency_penalty"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"min_p": 0.1}, "min_p"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "auto"}, "tool_choice"),
    ],
)
def test_unhonoured_openai_parameters_are_refused_by_name(
    fields: dict[str, Any], param: str
) -> None:
    err = _refused(_raw(**fields), CompletionRequest)
    body = err.body()["error"]
    assert (body["param"], body["code"], body["type"]) == (
        param,
        "unsupported_parameter",
        "invalid_request_error",
    )
    assert param in body["message"]


def test_logprobs_are_read_in_each_endpoints_shape() -> None:
    assert parse_body(_raw(logprobs=0), CompletionRequest, LIMIT).num_logprobs == 0
    assert parse_body(_raw(logprobs=20), CompletionRequest, LIMIT).num_logprobs == 20
    assert parse_body(_raw(), CompletionRequest, LIMIT).num_logprobs is None
    messages = [{"role": "user", "content": "hi"}]
    assert _chat(messages, logprobs=True).num_logprobs == 0
    assert _chat(messages, logprobs=True, top_logprobs=5).num_logprobs == 5
    assert _chat(messages, logprobs=False, top_logprobs=0).num_logprobs is None


@pytest.mark.parametrize(
    ("fields", "is_chat", "message"),
    [
        ({"logprobs": 21}, False, "logprobs: Input should be less than or equal to 20"),
        ({"logprobs": -1}, False, "logprobs: Input should be greater than or equal to 0"),
        ({"logprobs": True}, False, "logprobs: Input should be a valid integer"),
        ({"logprobs": 2}, True, "logprobs: Input should be a valid boolean"),
        ({"top_logprobs": 3}, True, "top_logprobs needs logprobs: true"),
        ({"logprobs": True, "top_logprobs": 21}, True, "top_logprobs: Input should be less"),
    ],
)
def test_bad_logprobs_are_400(fields: dict[str, Any], is_chat: bool, message: str) -> None:
    body = {"model": "m", **fields}
    body.update({"messages": [{"role": "user", "content": "hi"}]} if is_chat else {"prompt": "x"})
    kind = ChatCompletionRequest if is_chat else CompletionRequest
    assert message in str(_refused(json.dumps(body).encode(), kind))


def test_unhonoured_parameters_at_their_defaults_are_accepted() -> None:
    defaults = {
        "echo": False,
        "best_of": 1,
        "suffix": None,
        "logit_bias": {},
        "response_format": {"type": "text"},
        "tools": [],
        "tool_choice": "none",
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "min_p": 0,
    }
    assert set(defaults) <= set(REFUSED)
    assert parse_body(_raw(**defaults), CompletionRequest, LIMIT).prompts == ["hi"]
    chat = _chat([{"role": "user", "content": "hi"}], logprobs=False, top_logprobs=None)
    assert transcript(chat.chat.messages).endswith("assistant:")


def test_chat_content_parts_and_the_developer_role() -> None:
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "there"}]
    req = _chat([{"role": "developer", "content": "be brief"}, {"role": "user", "content": parts}])
    assert transcript(req.chat.messages) == "system: be brief\nuser: hello there\nassistant:"
    same = _chat(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    )
    assert transcript(same.chat.messages) == transcript(req.chat.messages)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([{"type": "image_url", "image_url": {"url": "http://x"}}], "'image_url' is not supported"),
        ([{"type": "input_audio"}], "'input_audio' is not supported"),
        ([{"type": "text"}], "a text part needs its text"),
        ([{"text": "no type"}], "type: Field required"),
        (None, "content"),
    ],
)
def test_non_text_content_parts_are_400(content: Any, message: str) -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()
    assert message in str(_refused(raw, ChatCompletionRequest))


def test_the_tool_role_is_refused() -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "tool", "content": "x"}]}).encode()
    assert "role" in str(_refused(raw, ChatCompletionRequest))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_FIELDS = st.sampled_from(
    [
        "model",
        "prompt",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "n",
        "logprobs",
        "presence_penalty",
        "response_format",
        "max_completion_tokens",
    ]
)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_give_a_request_or_a_400(raw: bytes) -> None:
    for kind in (CompletionRequest, ChatCompletionRequest):
        with contextlib.suppress(BadRequestError):
            parse_body(raw, kind, LIMIT)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(_FIELDS, _JSON, max_size=8), chat=st.booleans())
def test_any_json_object_gives_a_request_or_a_400(body: dict[str, Any], chat: bool) -> None:
    kind = ChatCompletionRequest if chat else CompletionRequest
    try:
        req = parse_body(json.dumps(body).encode(), kind, LIMIT)
    except BadRequestError:
        return
    assert req.seed is None or -(2**63) <= req.seed < 2**63
    assert 0 <= req.sampling_temperature <= 2 and 0 < req.top_p <= 1
    assert all(req.stops) and len(req.stops) <= MAX_STOP_SEQUENCES
    # what the router sends to /tokenize
    sent = req.chat.model_dump_json() if isinstance(req, ChatCompletionRequest) else req.prompts
    json.dumps(sent).encode("utf-8")


@pytest.mark.parametrize(
    "fields",
    [
        {"seed": 2**64},
        {"seed": -(2**63) - 1},
        {"temperature": float("nan")},
        {"temperature": 1e300},
        {"top_p": 0.0},
        {"top_k": 2**40},
        {"stop": [""]},
        {"max_tokens": 0},
    ],
)
def test_the_instance_checks_sampling_again(fields: dict[str, Any]) -> None:
    """Defence in depth: a `Sampling` the router should never send is refused by the
    instance's own body model (a 422 there, the request's error), not run."""
    base = {"max_tokens": 4, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0}
    with pytest.raises(ValidationError):
        Sampling.model_validate({**base, **fields})
