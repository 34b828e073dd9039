"""OpenAI and vLLM API coverage against a live emulated deployment (no torch): lists of
prompts and token-id prompts (one choice each, in order), `n` samples, cached prompt tokens
in usage, `/v1/models` as vLLM gives it, `/version`, `/tokenize` and `/detokenize`.

Emulated outputs are a pure function of the prompt, so a choice's text can be compared with
the same prompt sent alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import emulated_deployment, running

from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

MODEL = "prfaas-1t"
BOS = 257
FIXTURE_REUSED = HealthCheck.function_scoped_fixture  # the module's deployment, on purpose


@pytest.fixture(scope="module")
def live() -> Iterator[Launcher]:
    with running(emulated_deployment()) as launcher:
        yield launcher


def _post(live: Launcher, path: str, **body: Any) -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=120)


def _complete(live: Launcher, **body: Any) -> dict[str, Any]:
    response = _post(live, "/v1/completions", **{"model": MODEL, "max_tokens": 5, **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _ids(text: str) -> list[int]:
    return [BOS, *text.encode()]


def test_a_list_of_prompts_gives_one_choice_per_prompt_in_order(live: Launcher) -> None:
    prompts = ["alpha", "beta gamma", "delta epsilon zeta"]
    alone = [_complete(live, prompt=p) for p in prompts]
    together = _complete(live, prompt=prompts)
    assert [c["index"] for c in together["choices"]] == [0, 1, 2]
    assert [c["text"] for c in together["choices"]] == [a["choices"][0]["text"] for a in alone]
    usage = together["usage"]
    assert usage["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
    assert usage["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in alone)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert len(together["prfaas"]["choices"]) == 3  # each choice routed on its own


def test_token_id_prompts_are_taken_as_they_are(live: Launcher) -> None:
    text = _complete(live, prompt="hello there")["choices"][0]["text"]
    one = _complete(live, prompt=_ids("hello there"))
    assert one["choices"][0]["text"] == text
    assert one["usage"]["prompt_tokens"] == len(_ids("hello there"))
    many = _complete(live, prompt=[_ids("hello there"), _ids("x")])
    assert [c["index"] for c in many["choices"]] == [0, 1]
    assert many["choices"][0]["text"] == text


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([300], "prompt 0: token id 300 is not in the vocabulary (259 ids)"),
        ([[1], [2, 999]], "prompt 1: token id 999 is not in the vocabulary"),
        ([-1], "token ids are integers in"),
        (["a", [1]], "the prompt must be a string, a list of strings"),
        ([], "the prompt is empty"),
    ],
)
def test_bad_prompts_are_a_400_naming_the_prompt(live: Launcher, prompt: Any, message: str) -> None:
    response = _post(live, "/v1/completions", model=MODEL, prompt=prompt)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert error["param"] == "prompt"


def test_n_samples_are_choices_numbered_prompt_major(live: Launcher) -> None:
    body = _complete(live, prompt=["one", "two"], n=3, temperature=0)
    choices = body["choices"]
    assert [c["index"] for c in choices] == list(range(6))
    # greedy (and the emulated model) gives every sample of a prompt the same text
    assert len({c["text"] for c in choices[:3]}) == 1
    assert len({c["text"] for c in choices[3:]}) == 1
    alone = _complete(live, prompt="two")
    assert body["usage"]["prompt_tokens"] == len(_ids("one")) + alone["usage"]["prompt_tokens"]
    assert body["usage"]["completion_tokens"] == 6 * 5
    chat = _post(
        live,
        "/v1/chat/completions",
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
        n=2,
        max_tokens=3,
    )
    assert chat.status_code == 200, chat.text
    assert [c["index"] for c in chat.json()["choices"]] == [0, 1]
    assert chat.json()["id"].startswith("chatcmpl-")


def _sse(response: httpx.Response) -> list[dict[str, Any]]:
    lines = [line for line in response.text.split("\n\n") if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


def test_streaming_a_list_of_prompts_tags_every_chunk_with_its_choice(live: Launcher) -> None:
    prompts = [_ids("stream one"), [BOS, 120, 121], _ids("stream three")]
    whole = _complete(live, prompt=prompts, n=2)
    response = _post(
        live,
        "/v1/completions",
        model=MODEL,
        prompt=prompts,
        n=2,
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert response.status_code == 200
    events = _sse(response)
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for event in events[:-1]:
        (part,) = event["choices"]
        texts[part["index"]] = texts.get(part["index"], "") + part["text"]
        if part["finish_reason"] is not None:
            finishes.setdefault(part["index"], []).append(part["finish_reason"])
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    assert finishes == {i: ["length"] for i in range(6)}
    assert len({e["id"] for e in events}) == 1
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == whole["usage"]


def test_usage_counts_the_prompt_tokens_found_in_the_prefix_cache(live: Launcher) -> None:
    prompt = "a prompt that is cached the second time " * 2  # 81 tokens < t: PD-P
    first = _complete(live, prompt=prompt)
    second = _complete(live, prompt=prompt)
    for body in (first, second):
        cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == body["prfaas"]["hit_tokens"]
        assert 0 <= cached < body["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 80  # 5 blocks of 16


def test_models_lists_the_served_model_with_vllms_fields(live: Launcher) -> None:
    body = httpx.get(live.url + "/v1/models", timeout=30).json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert (card["id"], card["object"], card["owned_by"], card["root"], card["parent"]) == (
        MODEL,
        "model",
        "prfaas",
        MODEL,
        None,
    )
    assert isinstance(card["created"], int) and card["created"] > 0
    assert card["max_model_len"] == emulated_deployment().emulation.max_context_tokens
    (permission,) = card["permission"]
    assert permission["object"] == "model_permission"
    assert permission["id"].startswith("modelperm-")
    assert {"allow_sampling", "allow_logprobs", "organization", "is_blocking"} <= set(permission)
    version = httpx.get(live.url + "/version", timeout=30).json()
    assert set(version) == {"version"} and version["version"]


def test_tokenize_gives_the_ids_the_completions_use(live: Launcher) -> None:
    body = _post(live, "/tokenize", model=MODEL, prompt="héllo").json()
    assert body["tokens"] == _ids("héllo")
    assert body["count"] == len(body["tokens"])
    assert body["max_model_len"] == emulated_deployment().emulation.max_context_tokens
    messages = [{"role": "user", "content": "hi"}]
    chat = _post(live, "/tokenize", model=MODEL, messages=messages).json()
    completion = _post(live, "/v1/chat/completions", model=MODEL, messages=messages).json()
    assert chat["count"] == completion["usage"]["prompt_tokens"]
    assert _post(live, "/detokenize", model=MODEL, tokens=[]).json() == {"prompt": ""}


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/tokenize", {"prompt": "x"}, 400, "model"),
        ("/tokenize", {"model": "other", "prompt": "x"}, 404, None),
        ("/tokenize", {"model": MODEL, "prompt": ""}, 400, "prompt"),
        ("/tokenize", {"model": MODEL, "prompt": 5}, 400, "prompt"),
        ("/tokenize", {"model": MODEL, "messages": [], "add_special_tokens": True}, 400, None),
        (
            "/tokenize",
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "add_special_tokens": True,
            },
            400,
            None,
        ),
        (
            "/tokenize",
            {"model": MODEL, "prompt": "x", "return_token_strs": True},
            400,
            None,
        ),
        ("/tokenize", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/detokenize", {"model": MODEL, "tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"model": MODEL, "tokens": ["a"]}, 400, "tokens"),
        ("/detokenize", {"model": MODEL, "tokens": [259]}, 400, "tokens"),
        ("/detokenize", {"model": MODEL}, 400, "tokens"),
    ],
)
def test_bad_tokenizer_calls_are_openai_errors(
    live: Launcher, path: str, body: dict[str, Any], status: int, param: str | None
) -> None:
    response = httpx.post(live.url + path, json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    if body.get("add_special_tokens") and body.get("messages"):
        assert (error["param"], error["code"]) == ("add_special_tokens", "unsupported_parameter")


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_TEXT)
def test_detokenize_inverts_tokenize(live: Launcher, text: str) -> None:
    tokens = _post(live, "/tokenize", model=MODEL, prompt=text).json()["tokens"]
    assert tokens == _ids(text)
    plain = _post(live, "/tokenize", model=MODEL, prompt=text, add_special_tokens=False)
    assert plain.json()["tokens"] == list(text.encode())  # vLLM's switch: no <bos>
    assert _post(live, "/detokenize", model=MODEL, tokens=tokens).json() == {"prompt": text}


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(prompts=st.lists(_TEXT, min_size=1, max_size=5), n=st.integers(1, 2))
def test_k_prompts_and_n_samples_give_k_times_n_choices(
    live: Launcher, prompts: list[str], n: int
) -> None:
    body = _complete(live, prompt=prompts, n=n, max_tokens=2)
    assert [c["index"] for c in body["choices"]] == list(range(len(prompts) * n))
    assert body["usage"]["prompt_tokens"] == sum(len(_ids(p)) for p in prompts)


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("/v1/completions", {"prompt": "x", "logprobs": 2}),
        ("/v1/completions", {"prompt": "x", "logprobs": 0}),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "logprobs": True},
        ),
    ],
)
def test_emulated_instances_refuse_logprobs_rather_than_make_them_up(
    live: Launcher, path: str, fields: dict[str, Any]
) -> None:
    response = _post(live, path, model=MODEL, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["param"], error["code"]) == ("logprobs", "unsupported_parameter")
