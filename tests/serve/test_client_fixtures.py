"""Replays the exact requests guidellm and `vllm bench serve` send (captured by
`benchmarks/client_compat.py --record`, headers and bodies as sent) against a live emulated
deployment, and reads each answer the way those clients do, so CI checks the clients'
request shapes without installing them (docs/bench.md, "Third-party clients")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parent / "fixtures" / "client_requests.json"
RECORDS: list[dict[str, Any]] = json.loads(FIXTURES.read_text())


@pytest.fixture(scope="module")
def live() -> Iterator[Launcher]:
    with running(emulated_deployment()) as launcher:
        yield launcher


def test_the_fixtures_hold_each_clients_requests() -> None:
    shapes = {(r["client"], r["method"], r["path"]) for r in RECORDS}
    for client in ("guidellm", "vllm"):
        assert (client, "POST", "/v1/completions") in shapes
        assert (client, "POST", "/v1/chat/completions") in shapes
    assert ("vllm", "POST", "/tokenize") in shapes
    assert all(r["version"] for r in RECORDS)


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    """The SSE stream as those clients split it: `data: ` lines, `[DONE]` last."""
    payloads = [
        line.removeprefix("data: ")
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    assert payloads[-1] == "[DONE]"
    assert all(line.startswith("data: ") or not line for line in response.text.splitlines())
    return [json.loads(p) for p in payloads[:-1]]


def _text(event: dict[str, Any], is_chat: bool) -> str:
    """A chunk's text where each client reads it."""
    part = event["choices"][0]
    return str(part["delta"].get("content") or "") if is_chat else str(part["text"])


def _check_stream(body: dict[str, Any], response: httpx.Response, is_chat: bool) -> None:
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response)
    assert "".join(_text(e, is_chat) for e in events if e["choices"])
    wanted = body.get("max_completion_tokens") or body["max_tokens"]
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        usage = events[-1]["usage"]
        assert events[-1]["choices"] == []
        assert usage["completion_tokens"] == wanted  # ignore_eos: all of them
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    if options.get("continuous_usage_stats"):
        counts = [e["usage"]["completion_tokens"] for e in events if e["choices"]]
        assert counts == sorted(counts) and counts[-1] == wanted
    kind = "chat.completion.chunk" if is_chat else "text_completion"
    assert all(e["object"] == kind and e["model"] == body["model"] for e in events)
    if is_chat:
        assert all(e["id"].startswith("chatcmpl-") for e in events)


@pytest.mark.parametrize(
    "record", RECORDS, ids=[f"{r['client']}-{r['method']}-{r['path']}" for r in RECORDS]
)
def test_each_recorded_request_is_answered_as_its_client_reads_it(
    live: Launcher, record: dict[str, Any]
) -> None:
    body = record["body"]
    response = httpx.request(
        record["method"],
        live.url + record["path"],
        headers=record["headers"],
        content=None if body is None else json.dumps(body).encode(),
        timeout=120,
    )
    assert response.status_code == 200, response.text
    path = record["path"]
    if path in ("/v1/completions", "/v1/chat/completions"):
        assert body.get("stream"), "both clients stream: a JSON answer needs its own check"
        _check_stream(body, response, is_chat=path == "/v1/chat/completions")
    elif path == "/tokenize":
        answer = response.json()
        assert answer["count"] == len(answer["tokens"]) > 0
        assert all(isinstance(t, int) for t in answer["tokens"])
    elif path == "/health":
        assert response.json()["status"] == "ok"
    elif path == "/metrics":
        assert "prfaas:requests_total" in response.text
    else:
        pytest.fail(f"no check for {path}: add one")
