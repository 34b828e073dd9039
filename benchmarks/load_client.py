"""The router-overhead benchmark's load client: streamed completions over keep-alive HTTP/1.1
connections (`http1`), timed from the request's first byte sent to its first token and to
its end.

    open_loop(target, prompts, rate)         a request every 1/rate s, whatever came back:
                                             the latency at a fixed load
    closed_loop(target, prompts, c, secs)    c requests in flight, each followed by the next
                                             at once: the most a router passes at that
                                             concurrency

The first token is the first server-sent event whose `"text"` is not empty (every router
here streams OpenAI's completion events). Prompts are unique per request in their first
characters (`prompt`), so no prefix cache or cache-aware policy sees a hit the direct
baseline would not.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from http1 import Head, ProtocolError, iter_body, read_head

FIRST_TEXT = re.compile(rb'"text":\s*"(?!")')
#: The shared body of every prompt (after its unique number): random lowercase words.
_FILLER_SEED = 20261204


def filler(num_chars: int) -> str:
    """`num_chars` characters of lowercase letters and spaces, the same on every call."""
    rng = np.random.default_rng(_FILLER_SEED)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    return rng.choice(letters, size=num_chars).tobytes().decode()


def prompt(num_tokens: int, index: int, text: str) -> str:
    """Prompt `index` of `num_tokens` characters (one token each for prfaas's byte tokenizer,
    which adds a <bos>): its number first, so no two prompts share a prefix."""
    head = f"{index:09d} "
    return head + text[: max(0, num_tokens - len(head))]


def completion_body(model: str, text: str, output_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": model,
            "prompt": text,
            "max_tokens": output_tokens,
            "stream": True,
            "ignore_eos": True,
            "temperature": 0,
        }
    ).encode()


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request as the client saw it (times from its first byte sent)."""

    ttft_s: float | None
    e2e_s: float
    status: int
    error: str | None = None
    first_token_at_s: float | None = None  # time.monotonic() of the first token

    @property
    def is_ok(self) -> bool:
        return self.error is None and self.ttft_s is not None


@dataclass
class Target:
    """Where the requests go: a pool of keep-alive connections to one host and port."""

    host: str
    port: int
    path: str = "/v1/completions"
    timeout_s: float = 30.0  # a request not done by then is an outcome ("timeout"), not a hang
    _idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)

    async def complete(self, body: bytes) -> Outcome:
        """One streamed completion; a broken connection is an outcome, not an exception. A
        kept-alive connection the server closed meanwhile (its idle timeout) is no outcome:
        the request goes again on the next one, as any HTTP client's pool does."""
        while self._idle:
            reader, writer = self._idle.pop()
            outcome = await self._attempt(body, reader, writer)
            if outcome is not None:
                return outcome
        start_s = time.monotonic()
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port, limit=2**20)
        except OSError as err:
            return Outcome(None, time.monotonic() - start_s, 0, f"{type(err).__name__}: {err}")
        outcome = await self._attempt(body, reader, writer)
        if outcome is None:
            return Outcome(None, time.monotonic() - start_s, 0, "closed before the response")
        return outcome

    async def _attempt(
        self, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Outcome | None:
        """The request on this connection; None when it closed before a byte came back."""
        start_s = time.monotonic()
        head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        try:
            writer.write(head.encode() + body)
            answer = await asyncio.wait_for(read_head(reader), self.timeout_s)
        except (ConnectionError, ProtocolError):
            answer = None
        except TimeoutError as err:
            writer.close()
            return Outcome(None, time.monotonic() - start_s, 0, f"{type(err).__name__}: {err}")
        if answer is None:
            writer.close()
            return None
        try:
            outcome = await asyncio.wait_for(self._read(reader, answer, start_s), self.timeout_s)
        except (
            OSError,
            ProtocolError,
            asyncio.IncompleteReadError,
            ValueError,
            TimeoutError,
        ) as err:
            writer.close()
            return Outcome(None, time.monotonic() - start_s, 0, f"{type(err).__name__}: {err}")
        if answer.keeps_alive:
            self._idle.append((reader, writer))
        else:
            writer.close()
        return outcome

    async def _read(self, reader: asyncio.StreamReader, head: Head, start_s: float) -> Outcome:
        first_s: float | None = None
        seen = b""
        async for piece in iter_body(reader, head, is_response=True):
            if first_s is None:
                seen += piece
                if head.status == 200 and FIRST_TEXT.search(seen):
                    first_s = time.monotonic()
        end_s = time.monotonic()
        error = None if head.status == 200 else f"HTTP {head.status}: {seen[:200]!r}"
        if error is None and first_s is None:
            error = "no token in the stream"
        ttft_s = None if first_s is None else first_s - start_s
        return Outcome(ttft_s, end_s - start_s, head.status, error, first_s)

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()
        self._idle.clear()


async def open_loop(target: Target, bodies: Sequence[bytes], rate_per_s: float) -> list[Outcome]:
    """`bodies` sent one every 1/rate s (evenly spaced, so no burst queues behind another)."""
    start_s = time.monotonic()

    async def one(i: int, body: bytes) -> Outcome:
        await asyncio.sleep(max(0.0, start_s + i / rate_per_s - time.monotonic()))
        return await target.complete(body)

    return list(await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies))))


@dataclass(frozen=True, slots=True)
class ClosedLoopResult:
    outcomes: list[Outcome]
    wall_s: float
    client_cpu_s: float  # this process's CPU over the run: is the client the limit?


async def closed_loop(
    target: Target, body: Callable[[int], bytes], concurrency: int, duration_s: float
) -> ClosedLoopResult:
    """`concurrency` requests in flight until `duration_s` has passed; request i sends
    `body(i)` (made when it is sent, so no prompt repeats however many are sent)."""
    outcomes: list[Outcome] = []
    cpu0, start_s = time.process_time(), time.monotonic()
    deadline_s = start_s + duration_s
    taken = iter(range(10**9))

    async def lane() -> None:
        while time.monotonic() < deadline_s:
            outcomes.append(await target.complete(body(next(taken))))

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return ClosedLoopResult(outcomes, time.monotonic() - start_s, time.process_time() - cpu0)


def percentiles_ms(values_s: Sequence[float]) -> dict[str, float | None]:
    """p50, p90 and p99 of `values_s` in milliseconds (None without values)."""
    if not values_s:
        return {"p50": None, "p90": None, "p99": None}
    q = np.percentile(np.asarray(values_s) * 1e3, [50, 90, 99])
    return {
        "p50": round(float(q[0]), 3),
        "p90": round(float(q[1]), 3),
        "p99": round(float(q[2]), 3),
    }
