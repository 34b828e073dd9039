"""Issue 26: the vllm backend's reading of its child's completion stream, with a fake child.

`VllmBackend.decode` streams the decode from the `vllm serve` child over SSE. When the
child's engine dies mid-stream vLLM sends an error event, then `data: [DONE]`: that error
was skipped and the finish reason defaulted to "length", so the client got a 200 with a
short text. Here the child is an `httpx.MockTransport` answering scripted SSE bytes (cut in
small pieces), and the backend is built without starting a child (`_backend`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from prfaas.integrations.vllm.tiny import save_byte_tokenizer
from prfaas.serve import protocol as p
from prfaas.serve.backends.interface import Finished, Item, Token
from prfaas.serve.backends.vllm.backend import VllmBackend
from prfaas.serve.backends.vllm.text import load_tokenizer
from prfaas.serve.errors import InstanceFailedError


def _event(body: dict[str, Any] | str) -> bytes:
    """One SSE event as vLLM writes it: its JSON with non-ASCII characters as they are."""
    data = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


def _tokens(model_dir: Path, text: str, finish: str | None = None) -> bytes:
    """An event with the tokens of `text` (one per UTF-8 byte) and vLLM's finish reason."""
    ids = _ids(model_dir, text)
    choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": finish}
    return _event({"id": "cmpl-1", "object": "text_completion", "choices": [choice]})


DIED = _event(
    {
        "error": {
            "message": "EngineCore encountered an issue. See stack trace for the root cause.",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
)
DONE = _event("[DONE]")


def _ids(model_dir: Path, text: str) -> list[int]:
    return list(load_tokenizer(model_dir).encode(text, add_special_tokens=False).ids)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("byte-tokenizer")
    save_byte_tokenizer(out)
    return out


def _backend(model_dir: Path, child_stream: bytes) -> VllmBackend:
    """A `VllmBackend` whose child answers every completion with `child_stream`."""

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(child_stream), 5):
            yield child_stream[start : start + 5]

    def child(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        return httpx.Response(200, content=pieces())

    backend = object.__new__(VllmBackend)  # no child process: only the decode path runs
    backend.url = "http://child"
    backend._deployment = SimpleNamespace(model_name="m")
    backend._tokenizer = load_tokenizer(model_dir)
    backend._decodes = {}
    backend._client = httpx.AsyncClient(transport=httpx.MockTransport(child))
    return backend


def _decode(backend: VllmBackend, max_tokens: int = 12) -> list[Item]:
    """The items the backend hands the instance shell for a request whose first token (the
    prefill's) is "a", up to the request's end."""
    prompt = list(backend._tokenizer.encode("Hi").ids)
    first = backend._tokenizer.token_to_id("a")
    sampling = p.Sampling(max_tokens=max_tokens, temperature=0, top_p=1, top_k=0, seed=0)
    body = p.DecodeRequest(request_id="r", token_ids=prompt, first_token=first, sampling=sampling)

    async def run() -> list[Item]:
        out = backend.decode(asyncio.get_running_loop(), body, [])
        items: list[Item] = []
        while not items or isinstance(items[-1], Token):
            items.append(await asyncio.wait_for(out.get(), 10))
        return items

    return asyncio.run(run())


def _text(items: list[Item]) -> str:
    return "".join(i.text or "" for i in items if isinstance(i, Token))


def test_an_engine_that_dies_mid_stream_is_an_error_not_a_short_success(model_dir: Path) -> None:
    items = _decode(_backend(model_dir, _tokens(model_dir, "b") + DIED + DONE))
    assert [i.token_id for i in items if isinstance(i, Token)] == _ids(model_dir, "ab")
    assert isinstance(items[-1], InstanceFailedError)
    assert "EngineCore encountered an issue" in str(items[-1])


def test_a_stream_that_ends_without_a_finish_reason_is_an_error(model_dir: Path) -> None:
    items = _decode(_backend(model_dir, _tokens(model_dir, "bc") + DONE))
    assert isinstance(items[-1], InstanceFailedError)
    assert "without a finish reason" in str(items[-1])


def test_text_with_every_line_separator_crosses_the_child_stream(model_dir: Path) -> None:
    said = "b\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\u20acz"
    stream = _tokens(model_dir, said[:6]) + _tokens(model_dir, said[6:], "length") + DONE
    items = _decode(_backend(model_dir, stream))
    finished = items[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "length"
    assert finished.text == _text(items) == "a" + said


def test_the_childs_own_finish_reason_is_kept(model_dir: Path) -> None:
    items = _decode(_backend(model_dir, _tokens(model_dir, "bc", "stop") + DONE))
    assert isinstance(items[-1], Finished) and items[-1].finish_reason == "stop"
    assert _text(items) == "ab"  # EOS or a stop token id: the last token is not printed
    one = _decode(_backend(model_dir, b""), max_tokens=1)  # no child call: ends at the first
    assert isinstance(one[-1], Finished) and one[-1].finish_reason == "length"
