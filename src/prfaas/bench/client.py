"""One streamed completion, measured: SSE `/v1/completions` (or `/v1/chat/completions`,
`Api.CHAT`) in, a `RequestRecord` out.

The request asks for `stream: true` and `stream_options.include_usage`, so the server sends
one event per decoded chunk and a final usage event. The client stamps every event that
carries text with the run clock; those stamps are the token times (TTFT, ITL, TPOT, E2E all
follow from them in `prfaas.metrics`). When the usage says more completion tokens than text
events arrived (a chunk carried several tokens, or a token decoded to no text), the extra
tokens are counted at the last event's time: zero gaps, as vLLM counts them. `usage` also
gives the server's own prompt length and `prfaas.path` / `prfaas.hit_tokens` (our router) or
`prompt_tokens_details.cached_tokens` (OpenAI) the path and the prefix hit.

Nothing here raises for a failed request: every failure is a record with a short, countable
reason (`http 503 (code)`, `stream error (code)`, `timeout`, `connection lost`, ...). A 429
(the router's admission control: overloaded, retry later) is a *rejection*, not a failure:
the record says `is_rejected` and the summary counts it apart (`num_rejected`).
`CANNOT_CONNECT` is special: the runner stops the run on it (the server is gone).
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from prfaas.metrics import RequestRecord

#: Reason of a request that never reached the server (the runner aborts on it).
CANNOT_CONNECT = "cannot connect"
#: Bytes of an error response body read to find its OpenAI error code.
ERROR_BODY_BYTES = 65536

#: The status of a refusal by admission control (counted apart from failures, with a reason).
REJECTED_STATUS = 429

Clock = Callable[[], float]


class Api(enum.Enum):
    """Which OpenAI endpoint the requests go to (`--api`)."""

    COMPLETIONS = "completions"
    CHAT = "chat"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self is Api.CHAT else "/v1/completions"

    def body(self, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
        """A streamed request for `prompt` (chat: one user message) of `max_tokens` tokens."""
        body: dict[str, Any] = {"model": model}
        if self is Api.CHAT:
            body["messages"] = [{"role": "user", "content": prompt}]
            body["max_completion_tokens"] = max_tokens
        else:
            body["prompt"] = prompt
        body["max_tokens"] = max_tokens
        return body


@dataclass(slots=True)
class _Stream:
    """What one response stream told us so far (mutable while reading, then a record)."""

    token_times_s: list[float] = field(default_factory=list)
    last_event_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    path: str | None = None
    cached_tokens: int = 0

    def read_event(self, event: dict[str, Any], now_s: float) -> str | None:
        """Take one SSE event; return a failure reason if it is an error event."""
        if "error" in event:
            return f"stream error ({_error_code(event)})"
        self.last_event_s = now_s
        for choice in event.get("choices") or []:
            text = choice.get("text")
            if text is None:
                text = (choice.get("delta") or {}).get("content")
            if text:
                self.token_times_s.append(now_s)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
            details = usage.get("prompt_tokens_details") or {}
            self.cached_tokens = int(details.get("cached_tokens") or self.cached_tokens)
        info = event.get("prfaas")
        if isinstance(info, dict):
            self.path = info.get("path", self.path)
            self.cached_tokens = int(info.get("hit_tokens") or self.cached_tokens)
        return None

    def token_times(self) -> list[float]:
        """Text-event times, padded to the usage's completion count (module docstring)."""
        times = list(self.token_times_s)
        extra = (self.completion_tokens or 0) - len(times)
        if times and extra > 0 and self.last_event_s is not None:
            times.extend([self.last_event_s] * extra)
        return times


def _error_code(body: Any) -> str:
    """The OpenAI error's code or type, else 'unknown'."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("code") or error.get("type") or "unknown")
    return "unknown"


async def _http_failure(response: httpx.Response) -> str:
    raw = b""
    async for chunk in response.aiter_bytes():
        raw += chunk
        if len(raw) >= ERROR_BODY_BYTES:
            break
    try:
        code = _error_code(json.loads(raw))
    except ValueError:
        code = "not json"
    return f"http {response.status_code} ({code})"


async def _read_stream(response: httpx.Response, stream: _Stream, clock: Clock) -> str | None:
    """Read the SSE body into `stream`; a failure reason, or None when it ended well."""
    if response.status_code != 200:
        return await _http_failure(response)
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        return "not an SSE stream"
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            event = json.loads(payload)
        except ValueError:
            return "malformed stream"
        if not isinstance(event, dict):
            return "malformed stream"
        failure = stream.read_event(event, clock())
        if failure is not None:
            return failure
    return None if stream.token_times_s else "no tokens"


async def stream_completion(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    request_id: str,
    input_tokens: int,
    *,
    clock: Clock,
    timeout_s: float,
    api: Api = Api.COMPLETIONS,
) -> RequestRecord:
    """Send one streamed completion and measure it; never raises for a failed request."""
    stream = _Stream()
    arrival_s = clock()
    failure: str | None
    try:
        async with (
            asyncio.timeout(timeout_s),
            client.stream("POST", api.path, json=body) as response,
        ):
            failure = await _read_stream(response, stream, clock)
    except httpx.ConnectError:
        failure = CANNOT_CONNECT
    except (TimeoutError, httpx.TimeoutException):
        failure = "timeout"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
        failure = "connection lost"
    except httpx.HTTPError as err:
        failure = f"http client error ({type(err).__name__})"
    return RequestRecord.from_token_times(
        request_id,
        arrival_s,
        stream.prompt_tokens or input_tokens,
        [] if failure is not None else stream.token_times(),
        error=failure,
        is_rejected=failure is not None and failure.startswith(f"http {REJECTED_STATUS} "),
        path=stream.path,
        cached_tokens=stream.cached_tokens,
    )
