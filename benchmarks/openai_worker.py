"""A fixed-cost OpenAI-compatible worker: the zero-compute backend the peers' routers (and
the direct baseline) of `router_overhead.py` talk to.

    .venv/bin/python benchmarks/openai_worker.py --port 9000 [--model prfaas-1t]
        [--first-token-ms 0] [--token-ms 0]

`POST /v1/completions` answers `max_tokens` tokens (the word " tok" each): the first after
`--first-token-ms`, each next one `--token-ms` later; streamed as OpenAI's server-sent
events (one event per token, a usage event when `stream_options.include_usage`, then
`[DONE]`), or one JSON body without `stream`. The prompt is read (its length is the usage's
prompt tokens, one per character: the byte tokenizer of prfaas's emulated instances) and
otherwise ignored, so every prompt costs the same. What the routers ask of a worker besides:
`GET /health`, `/v1/models`, `/get_server_info`, `/get_model_info` (sglang-router's and
vllm-router's start-up checks); anything else is 404. One asyncio process, HTTP/1.1
keep-alive (`http1`); it prints `ready <port>` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from http1 import ProtocolError, chunk, read_body, read_head

TOKEN_TEXT = " tok"


@dataclass(frozen=True, slots=True)
class WorkerCost:
    """What a request costs the worker: the wait for its first token and between tokens."""

    first_token_s: float
    token_s: float


def _response(status: int, body: bytes, content_type: str = "application/json") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _event(payload: dict[str, Any]) -> bytes:
    return chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")


class Worker:
    def __init__(self, model: str, cost: WorkerCost) -> None:
        self.model = model
        self.cost = cost
        self._count = 0

    def _info(self, path: str) -> bytes | None:
        """The GET routes: facts the routers check at start-up."""
        if path == "/health":
            return b"{}"
        if path == "/v1/models":
            card = {"id": self.model, "object": "model", "owned_by": "router-overhead"}
            return json.dumps({"object": "list", "data": [card]}).encode()
        if path in ("/get_server_info", "/get_model_info"):
            return json.dumps({"model_path": self.model, "is_generation": True}).encode()
        return None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its requests in turn until the peer closes it."""
        try:
            while (head := await read_head(reader)) is not None:
                body = await read_body(reader, head)
                method, path = head.start[0], head.start[1].split("?", 1)[0]
                if method == "POST" and path == "/v1/completions":
                    await self._complete(body, writer)
                else:
                    answer = self._info(path) if method == "GET" else None
                    status = 404 if answer is None else 200
                    writer.write(_response(status, answer or b'{"error": "not found"}'))
                await writer.drain()
                if not head.keeps_alive:
                    break
        except (ProtocolError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _complete(self, raw: bytes, writer: asyncio.StreamWriter) -> None:
        try:
            body = json.loads(raw)
            num_tokens = int(body.get("max_tokens") or 16)
            prompt_tokens = len(body["prompt"])
        except (ValueError, KeyError, TypeError):
            writer.write(_response(400, b'{"error": "not a completion request"}'))
            return
        self._count += 1
        cid = f"cmpl-{self._count}"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": num_tokens,
            "total_tokens": prompt_tokens + num_tokens,
        }
        if not body.get("stream"):
            await asyncio.sleep(self.cost.first_token_s + self.cost.token_s * (num_tokens - 1))
            choice = {"index": 0, "text": TOKEN_TEXT * num_tokens, "finish_reason": "length"}
            answer = {"id": cid, "object": "text_completion", "model": self.model}
            writer.write(
                _response(
                    200, json.dumps(answer | {"choices": [choice]} | {"usage": usage}).encode()
                )
            )
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        await self._stream(cid, num_tokens, writer)
        if (body.get("stream_options") or {}).get("include_usage"):
            writer.write(
                _event({"id": cid, "object": "text_completion", "choices": [], "usage": usage})
            )
        writer.write(chunk(b"data: [DONE]\n\n") + chunk(b""))

    async def _stream(self, cid: str, num_tokens: int, writer: asyncio.StreamWriter) -> None:
        """The token events, each at its deadline from the request's start (no drift)."""
        start_s = time.monotonic()
        for i in range(num_tokens):
            due_s = start_s + self.cost.first_token_s + i * self.cost.token_s
            if due_s > time.monotonic():
                await asyncio.sleep(due_s - time.monotonic())
            finish = "length" if i == num_tokens - 1 else None
            choice = {"index": 0, "text": TOKEN_TEXT, "finish_reason": finish}
            writer.write(_event({"id": cid, "object": "text_completion", "model": self.model,
                                 "choices": [choice]}))  # fmt: skip
            await writer.drain()


async def serve(port: int, model: str, cost: WorkerCost) -> None:
    worker = Worker(model, cost)
    server = await asyncio.start_server(worker.serve, "127.0.0.1", port, backlog=1024)
    print(f"ready {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="prfaas-1t")
    ap.add_argument("--first-token-ms", type=float, default=0.0)
    ap.add_argument("--token-ms", type=float, default=0.0)
    args = ap.parse_args()
    cost = WorkerCost(args.first_token_ms / 1e3, args.token_ms / 1e3)
    asyncio.run(serve(args.port, args.model, cost))


if __name__ == "__main__":
    main()
