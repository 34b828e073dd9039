"""A minimal third-party-style OpenAI endpoint for the bench tests: plain asyncio, loopback.

It speaks just enough HTTP/1.1 (one request per connection, close-delimited bodies) to serve
`GET /v1/models` and streamed `POST /v1/completions` and `/v1/chat/completions` (text in
`choices[0].delta.content`) the way vLLM-like servers do: one SSE
event per chunk of `tokens_per_event` tokens, a usage event, `[DONE]`. Knobs make some
requests fail in each way the client must count. Runs in its own thread and event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any

MODEL = "fake-model"


@dataclass
class FakeOptions:
    tokens_per_event: int = 1
    token_delay_s: float = 0.001
    fail_every: int = 0  # every n-th completion gets HTTP 503
    reject_every: int = 0  # every n-th completion gets HTTP 429 (admission control)
    error_event_every: int = 0  # every n-th completion streams an error after one chunk
    not_found: bool = False  # answer 404 to everything (not an OpenAI endpoint)


@dataclass
class FakeServer:
    options: FakeOptions = field(default_factory=FakeOptions)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeServer:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True)
        self._thread.start()
        ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        loop = self._loop

        async def shutdown() -> None:
            """Cancel the handlers still streaming (a client cut them off), then stop."""
            handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        self._thread.join(5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            method, path, _ = head.split("\r\n")[0].split(" ")
            length = 0
            for line in head.split("\r\n")[1:]:
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":")[1])
            raw = await reader.readexactly(length) if length else b""
            await self._respond(method, path, raw, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _respond(
        self, method: str, path: str, raw: bytes, writer: asyncio.StreamWriter
    ) -> None:
        opts = self.options
        if opts.not_found or (method, path) not in {
            ("GET", "/v1/models"),
            ("POST", "/v1/completions"),
            ("POST", "/v1/chat/completions"),
        }:
            return _json(writer, 404, {"error": {"message": "no such route", "code": "nope"}})
        if path == "/v1/models":
            return _json(writer, 200, {"object": "list", "data": [{"id": MODEL}]})
        body = json.loads(raw)
        self.bodies.append(body)
        index = len(self.bodies)
        if opts.fail_every and index % opts.fail_every == 0:
            return _json(writer, 503, {"error": {"message": "busy", "code": "overloaded"}})
        if opts.reject_every and index % opts.reject_every == 0:
            body = {
                "error": {"message": "later", "type": "requests", "code": "rate_limit_exceeded"}
            }
            return _json(writer, 429, body)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        is_chat = path == "/v1/chat/completions"
        sent = 0
        while sent < body["max_tokens"]:
            chunk = min(opts.tokens_per_event, body["max_tokens"] - sent)
            sent += chunk
            text = "a" * chunk
            part = {"delta": {"content": text}} if is_chat else {"text": text}
            _event(writer, {"choices": [{"index": 0, **part}]})
            await writer.drain()
            await asyncio.sleep(opts.token_delay_s)
            if opts.error_event_every and index % opts.error_event_every == 0:
                _event(writer, {"error": {"message": "engine died", "code": "engine_failed"}})
                break
        else:
            prompt = body["messages"][0]["content"] if is_chat else body["prompt"]
            prompt_tokens = len(prompt)
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            _event(writer, {"choices": [], "usage": usage})
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()


def _event(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    writer.write(b"data: " + json.dumps(body).encode() + b"\n\n")


def _json(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\nconnection: close\r\n\r\n".encode()
        + data
    )
