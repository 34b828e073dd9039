"""The load generator: send arrivals on time, bounded, streamed; collect records; stop cleanly.

    arrivals ──► wait until start + at_s ──► semaphore (max concurrency) ──► task:
                 stream_completion ──► RequestRecord ──► on_record (progress) ──► result

Lifecycle of a run: resolve the model (`GET /v1/models`, unless `--model` names it) -> replay
-> wait for every request in flight -> `BenchResult`. The run ends early, with the records it
has and a one-line `stopped` reason, when the endpoint cannot be reached or does not answer
`/v1/models`, when a request cannot connect (the server is gone), when the first
`GIVE_UP_AFTER_FAILURES` requests all fail (wrong endpoint: an hour-long trace of 404s is
not a benchmark), or at a malformed trace line. Requests already in flight still finish;
nothing raises out of `run_bench` for a failing server.

The arrival time of a request is when it is sent: after its scheduled time and after the
concurrency gate, as vLLM `bench serve` measures it. Time is `time.perf_counter` since start.
The report's duration is `prfaas.metrics`' (first arrival -> last token, as the simulator
counts it); the run's wall time is reported beside it (`wall_s`).

`duration_s` (`--duration`) ends a run on time: no request is sent after it, and requests
still in flight then are cut off (failed, reason `CUT_OFF`), so a deployment driven above
saturation can be measured without waiting for its queues to drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from prfaas.bench.arrivals import Arrival
from prfaas.bench.client import CANNOT_CONNECT, Api, stream_completion
from prfaas.bench.errors import EndpointError, TraceLineError
from prfaas.bench.prompts import PromptSynthesizer, TokenUnit
from prfaas.metrics import MetricsSummary, RequestRecord, Slo, summarize

#: Reason of a request still in flight when `duration_s` ended the run.
CUT_OFF = "cut off (--duration)"
#: Failures with no success before them that stop a run (the endpoint is wrong).
GIVE_UP_AFTER_FAILURES = 10
DEFAULT_MAX_CONCURRENCY = 256
CONNECT_TIMEOUT_S = 10.0

OnRecord = Callable[[RequestRecord], None]


@dataclass(frozen=True, slots=True)
class BenchConfig:
    endpoint: str
    model: str | None = None
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    timeout_s: float = 600.0
    token_unit: TokenUnit = TokenUnit.BYTE
    seed: int = 0
    duration_s: float | None = None
    api: Api = Api.COMPLETIONS


@dataclass(frozen=True, slots=True)
class BenchResult:
    """What a run measured; `stopped` says why it ended early (None: it ran to the end)."""

    endpoint: str
    model: str | None
    records: tuple[RequestRecord, ...]
    duration_s: float
    stopped: str | None

    def summary(self, slo: Slo | None) -> MetricsSummary:
        """The metrics over first arrival -> last token (`prfaas.metrics`' duration)."""
        return summarize(self.records, slo)

    def to_json(self, slo: Slo | None, source: str) -> dict[str, Any]:
        """`prfaas.bench/1`, wrapping the same `prfaas.metrics/1` object the simulator writes;
        `wall_s` is the run's wall time (model look-up to the last request's end)."""
        return {
            "schema": "prfaas.bench/1",
            "endpoint": self.endpoint,
            "model": self.model,
            "source": source,
            "stopped": self.stopped,
            "wall_s": self.duration_s,
            "metrics": self.summary(slo).to_json(),
        }

    def records_jsonl(self) -> str:
        """One JSON line per request (send order), the timeline the summary is built from."""
        lines = []
        for r in sorted(self.records, key=lambda r: r.arrival_s):
            row = {
                "request_id": r.request_id,
                "arrival_s": r.arrival_s,
                "first_token_s": r.first_token_s,
                "last_token_s": r.last_token_s,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "cached_tokens": r.cached_tokens,
                "path": r.path,
                "error": r.error,
            }
            lines.append(json.dumps(row) + "\n")
        return "".join(lines)


def base_url(endpoint: str) -> str:
    """The server root: `http://host:port` or `.../v1` both work; anything else is an error."""
    try:
        url = httpx.URL(endpoint)
    except (httpx.InvalidURL, TypeError) as err:
        raise EndpointError(f"bad endpoint {endpoint!r}: {err}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise EndpointError(f"bad endpoint {endpoint!r}: give http://host:port")
    root = str(url).rstrip("/")
    return root.removesuffix("/v1")


async def resolve_model(client: httpx.AsyncClient) -> str:
    """The first model `/v1/models` lists; EndpointError when there is none to be had."""
    where = f"{client.base_url}/v1/models"
    try:
        response = await client.get("/v1/models")
    except httpx.ConnectError as err:
        raise EndpointError(f"cannot connect to {client.base_url} ({err})") from None
    except httpx.HTTPError as err:
        raise EndpointError(f"{where} failed ({type(err).__name__})") from None
    if response.status_code != 200:
        raise EndpointError(
            f"{where} answered HTTP {response.status_code}: not an OpenAI-compatible "
            "endpoint? (--model NAME skips this check)"
        )
    try:
        return str(response.json()["data"][0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise EndpointError(f"{where} lists no model (--model NAME names one)") from None


class _Run:
    """The state of one run: gate, tasks, records and the reason to stop early."""

    def __init__(
        self, config: BenchConfig, client: httpx.AsyncClient, model: str, on_record: OnRecord
    ) -> None:
        self.config = config
        self.client = client
        self.model = model
        self.on_record = on_record
        self.prompts = PromptSynthesizer(config.token_unit, config.seed)
        self.gate = asyncio.Semaphore(config.max_concurrency)
        self.stop = asyncio.Event()
        self.stopped: str | None = None
        self.records: list[RequestRecord] = []
        self.failures: Counter[str] = Counter()
        self.tasks: set[asyncio.Task[None]] = set()
        self.start_s = time.perf_counter()

    def clock(self) -> float:
        return time.perf_counter() - self.start_s

    def halt(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        self.stop.set()

    async def replay(self, arrivals: Iterable[Arrival]) -> None:
        end_s = self.config.duration_s
        try:
            for arrival in arrivals:
                if end_s is not None and arrival.at_s >= end_s:
                    break
                delay = arrival.at_s - self.clock()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop.wait(), delay)
                await self.gate.acquire()
                if self.stop.is_set():
                    self.gate.release()
                    break
                task = asyncio.create_task(self.send(arrival))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        except TraceLineError as err:
            self.halt(str(err))
        while self.tasks:
            await asyncio.gather(*self.tasks)

    async def send(self, arrival: Arrival) -> None:
        timeout_s, cut_off = self.config.timeout_s, False
        if self.config.duration_s is not None:
            left_s = self.config.duration_s - self.clock()
            cut_off = left_s < timeout_s
            timeout_s = max(0.0, min(timeout_s, left_s))
        try:
            prompt = self.prompts.prompt(arrival.input_tokens, arrival.hash_ids, arrival.request_id)
            body = {
                **self.config.api.body(self.model, prompt, arrival.output_tokens),
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
                "temperature": 0.0,
            }
            record = await stream_completion(
                self.client,
                body,
                arrival.request_id,
                arrival.input_tokens,
                clock=self.clock,
                timeout_s=timeout_s,
                api=self.config.api,
            )
        finally:
            self.gate.release()
        if cut_off and record.error == "timeout":
            record = dataclasses.replace(record, error=CUT_OFF)
        self.records.append(record)
        self.on_record(record)
        self.check(record)

    def check(self, record: RequestRecord) -> None:
        """Stop on a lost server, or when the first requests all failed (module docstring)."""
        if record.error == CANNOT_CONNECT:
            self.halt(f"cannot connect to {self.client.base_url}: the server is unreachable")
        if record.error is not None:
            self.failures[record.error] += 1
        num_failed = self.failures.total()
        if num_failed == len(self.records) >= GIVE_UP_AFTER_FAILURES:
            reason, _ = self.failures.most_common(1)[0]
            self.halt(
                f"the first {num_failed} requests all failed ({reason}): is "
                f"{self.client.base_url} an OpenAI-compatible completions endpoint?"
            )


async def run_bench(
    config: BenchConfig, arrivals: Iterable[Arrival], on_record: OnRecord = lambda _: None
) -> BenchResult:
    """Replay `arrivals` against the endpoint (module docstring); always returns a result."""
    root = base_url(config.endpoint)
    if config.max_concurrency < 1:
        raise EndpointError("--max-concurrency must be at least 1")
    if config.duration_s is not None and config.duration_s <= 0:
        raise EndpointError("--duration must be positive")
    limits = httpx.Limits(
        max_connections=config.max_concurrency, max_keepalive_connections=config.max_concurrency
    )
    timeout = httpx.Timeout(config.timeout_s, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(base_url=root, limits=limits, timeout=timeout) as client:
        try:
            model = config.model or await resolve_model(client)
        except EndpointError as err:
            return BenchResult(root, config.model, (), 0.0, str(err))
        run = _Run(config, client, model, on_record)
        await run.replay(arrivals)
        return BenchResult(root, model, tuple(run.records), run.clock(), run.stopped)
