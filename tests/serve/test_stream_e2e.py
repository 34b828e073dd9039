"""Issue 26 end to end: generated text with every line separator, and stop strings, through
the real router and instance processes.

An emulated deployment whose model says `SCRIPT` (`emulation.output_text`): every character
`str.splitlines` splits at, then multi-byte characters, one byte per token. Before the fix a
JSON completion of it was a 500 and a stream stopped without an error event or `[DONE]`;
a streamed stop string reached the client although the JSON answer stopped before it.
Each case runs on both paths (a short prompt: PD-P; a long one: PrfaaS), on both APIs,
streamed and not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve.config.deployment import EmulationSpec
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
SCRIPT = "".join(f"{c}{s}" for c, s in zip("abcdefghij", SEPARATORS, strict=True)) + "k \xe9\u20acm"
MAX_TOKENS = len(SCRIPT.encode())  # the script once: one token per byte
PROMPTS = {"pd-p": "Hello there", "prfaas": "The quick brown fox jumps over the lazy dog. " * 4}
STOPS = ["m", "\u2028", "\xe9", "\u20acm", "k \xe9", "\x85i", "\n", "\r", "zz"]


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    emulation = EmulationSpec(time_factor=0.01, byte_factor=1e-3, output_text=SCRIPT)
    with running(emulated_deployment(emulation=emulation), timeout_s=60) as launcher:
        yield launcher


def _body(path: str, is_chat: bool, stop: str | None, stream: bool) -> dict[str, Any]:
    prompt = PROMPTS[path]
    body: dict[str, Any] = {"model": "prfaas-1t", "max_tokens": MAX_TOKENS, "stream": stream}
    if is_chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stop is not None:
        body["stop"] = [stop]
    return body


def _answer(launcher: Launcher, body: dict[str, Any], is_chat: bool) -> tuple[str, str, str]:
    """(text, finish reason, path) of a JSON completion."""
    endpoint = "/v1/chat/completions" if is_chat else "/v1/completions"
    response = httpx.post(launcher.url + endpoint, json=body, timeout=60)
    assert response.status_code == 200, response.text
    out = response.json()
    choice = out["choices"][0]
    text = choice["message"]["content"] if is_chat else choice["text"]
    return text, choice["finish_reason"], out["prfaas"]["path"]


def _streamed(launcher: Launcher, body: dict[str, Any], is_chat: bool) -> tuple[str, str]:
    """(text, finish reason) of a stream that ended with `[DONE]` and no error event; its
    events are split at the SSE blank line only (a client's own line splitting is not what
    is tested here)."""
    endpoint = "/v1/chat/completions" if is_chat else "/v1/completions"
    with httpx.stream("POST", launcher.url + endpoint, json=body, timeout=60) as response:
        assert response.status_code == 200
        raw = response.read()
    events = [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]", raw[-300:]
    text, finish = "", ""
    for event in map(json.loads, events[:-1]):
        assert "error" not in event, event
        for choice in event["choices"]:
            text += (choice["delta"].get("content") or "") if is_chat else choice["text"]
            finish = choice["finish_reason"] or finish
    return text, finish


@pytest.mark.parametrize("is_chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("path", list(PROMPTS))
def test_text_with_every_line_separator_arrives_whole(
    launcher: Launcher, path: str, is_chat: bool
) -> None:
    text, finish, ran = _answer(launcher, _body(path, is_chat, None, False), is_chat)
    assert (text, finish, ran) == (SCRIPT, "length", path)
    assert _streamed(launcher, _body(path, is_chat, None, True), is_chat) == (SCRIPT, "length")


@pytest.mark.parametrize("is_chat", [False, True], ids=["completions", "chat"])
@pytest.mark.parametrize("path", list(PROMPTS))
def test_a_streamed_stop_string_never_leaks_and_equals_the_json_answer(
    launcher: Launcher, path: str, is_chat: bool
) -> None:
    for stop in STOPS:
        cut = SCRIPT.find(stop)
        expected = (SCRIPT, "length") if cut < 0 else (SCRIPT[:cut], "stop")
        text, finish, _ = _answer(launcher, _body(path, is_chat, stop, False), is_chat)
        assert (text, finish) == expected, stop
        assert _streamed(launcher, _body(path, is_chat, stop, True), is_chat) == expected, stop
