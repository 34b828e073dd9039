"""`/v1/completions` and `/v1/chat/completions`: a request's choices through the deployment.

A request has one choice per prompt and sample: a list of prompts (`prompt: ["a", "b"]` or
token-id lists) times `n`. Each choice is a request of its own to the scheduler (as vLLM
schedules each prompt and each of the `n` samples as its own sequence): placed, prefilled and
decoded wherever its decision says, concurrently with its siblings. Choice `index` is
`prompt_index * n + sample` (vLLM's numbering). Sample `k` of `n` samples with seed `seed + k`
(so `n` samples differ unless sampling is greedy, where they are equal). Usage counts each
prompt's tokens once and every choice's completion tokens; `cached_tokens` are the prompt
tokens the prefill found in its prefix cache (sample 0 of each prompt).

Every choice is placed and prefilled before the response starts, so placement and prefill
errors keep their HTTP status; a failure after the first token ends the stream with an error
event (or the JSON request with the error). One choice failing fails the request.

A client that disconnects cancels its request: Starlette cancels a stream, and a JSON request
races its work against the disconnect (`_or_gone`); a stream whose send fails is closed by
`ClosingStreamingResponse` at once, not by the garbage collector. Either way every choice's
generator is closed (`_merged` cancels the tasks that drive them), which closes the decode
instance's stream, which cancels the request there. Each HTTP request is counted once by
how it ended (`RouterMetrics.ended`); each choice is observed (TTFT, tokens, access log) when
it finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from prfaas.serve import protocol as p
from prfaas.serve.edge.openai_api import (
    SEED_MAX,
    SEED_MIN,
    ChatCompletionRequest,
    CompletionRequest,
    Prompt,
    chat_logprobs,
    choice,
    completion_logprobs,
    envelope,
    parse_body,
    usage,
)
from prfaas.serve.errors import BadRequestError, ModelNotFoundError, ServeError
from prfaas.serve.router.admission import AdmissionRejectedError
from prfaas.serve.router.flow import (
    Placed,
    RouterRuntime,
    check_length,
    check_token_ids,
    context_tokens,
    generate,
)

DEFAULT_MAX_TOKENS = 16
#: Sampling fields whose absence lets the engine choose (vLLM: the model's generation config).
ENGINE_DEFAULTS: tuple[Literal["temperature", "top_p", "top_k"], ...] = (
    "temperature",
    "top_p",
    "top_k",
)
CLIENT_GONE_STATUS = 499  # nginx's "client closed request": nobody reads it
_T = TypeVar("_T")
AnyRequest = CompletionRequest | ChatCompletionRequest


@dataclass(frozen=True, slots=True)
class Job:
    """One choice of a request: its prompt's tokens and its sampling."""

    index: int
    prompt_index: int
    sample: int
    tokens: list[int]
    sampling: p.Sampling


@dataclass(slots=True)
class Choice:
    """What one choice has produced so far."""

    job: Job
    placed: Placed | None = None
    text: str = ""
    finish: str | None = None
    completion_tokens: int = 0
    ttft_s: float = 0.0
    logprobs: list[p.Logprob] = field(default_factory=list)
    streamed_chars: int = 0  # text sent so far in a stream (the next token's text_offset)

    def add(self, chunk: p.DecodeChunk, started: float) -> None:
        if not self.ttft_s:
            self.ttft_s = time.monotonic() - started
        if chunk.logprob is not None:
            self.logprobs.append(chunk.logprob)
        self.text += chunk.text
        if chunk.token_id is not None:
            self.completion_tokens += 1  # so far; the final chunk says how many in all
        self.completion_tokens = chunk.num_completion_tokens or self.completion_tokens
        if chunk.finish_reason is not None:
            self.finish = chunk.finish_reason
            self.text = chunk.full_text if chunk.full_text is not None else self.text


Item = tuple[int, Placed | p.DecodeChunk]


def nth_seed(seed: int, sample: int) -> int:
    """Sample `sample`'s seed: `seed + sample`, wrapped into the signed 64-bit range."""
    span = SEED_MAX - SEED_MIN + 1
    return (seed + sample - SEED_MIN) % span + SEED_MIN


def _sampling(req: AnyRequest, max_tokens: int, sample: int) -> p.Sampling:
    return p.Sampling(
        max_tokens=max_tokens,
        temperature=req.sampling_temperature,
        top_p=req.top_p,
        top_k=req.sampling_top_k,
        seed=nth_seed(req.seed or 0, sample),
        stop=req.stops,
        ignore_eos=req.ignore_eos,
        logprobs=req.num_logprobs,
        engine_defaults=[f for f in ENGINE_DEFAULTS if f not in req.model_fields_set],
    )


async def _prompt_tokens(rt: RouterRuntime, prompt: Prompt, index: int) -> list[int]:
    if isinstance(prompt, str):
        return await rt.prompts.encode(prompt)
    check_token_ids(rt, prompt, f"prompt {index}")
    return list(prompt)


async def _prepare(
    rt: RouterRuntime, request: Request, is_chat: bool
) -> tuple[AnyRequest, list[Job]]:
    raw = await request.body()  # read and bounded by serve.edge.guard.EdgeGuard
    kind: type[AnyRequest] = ChatCompletionRequest if is_chat else CompletionRequest
    req = parse_body(raw, kind, rt.deployment.router.max_body_bytes)
    if req.model != rt.deployment.model_name:
        raise ModelNotFoundError(f"the model {req.model!r} does not exist")
    if req.num_logprobs is not None and not rt.registry.computes_logprobs():
        err = BadRequestError(
            "logprobs: this deployment's instances compute no logprobs (emulated backend; "
            "docs/serving.md)",
            param="logprobs",
        )
        err.code = "unsupported_parameter"
        raise err
    if isinstance(req, ChatCompletionRequest):
        tokens = [await rt.prompts.encode_chat(req.chat)]
    else:
        prompts = req.prompts
        tokens = await asyncio.gather(*(_prompt_tokens(rt, pr, i) for i, pr in enumerate(prompts)))
    wanted = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        wanted = req.max_completion_tokens
    max_tokens = wanted if wanted is not None else _default_max_tokens(rt, req, tokens[0])
    for prompt_tokens in tokens:
        check_length(rt, prompt_tokens, max_tokens)
    jobs = [
        Job(i * req.n + k, i, k, prompt_tokens, _sampling(req, max_tokens, k))
        for i, prompt_tokens in enumerate(tokens)
        for k in range(req.n)
    ]
    return req, jobs


def _default_max_tokens(rt: RouterRuntime, req: AnyRequest, prompt_tokens: list[int]) -> int:
    """`max_tokens` when the request names none: 16, as vLLM's completions; a chat runs to the
    end of the context where the instances say their engine does (`/info`
    `chat_runs_to_context`: vLLM's, as `vllm serve` alone does; elsewhere 16 too: an emulated
    context of 10^5 tokens is no default)."""
    if isinstance(req, ChatCompletionRequest) and rt.registry.chat_runs_to_context():
        return max(1, context_tokens(rt) - len(prompt_tokens))
    return DEFAULT_MAX_TOKENS


async def _merged(rt: RouterRuntime, jobs: list[Job]) -> AsyncGenerator[Item]:
    """Every job's stream (`flow.generate`: Placed, then DecodeChunks), interleaved as the
    items come, each tagged with its choice index. Closing this generator (or an error in any
    job) cancels every job's task, which closes its stream on the instances."""
    queue: asyncio.Queue[tuple[int, Placed | p.DecodeChunk | Exception | None]] = asyncio.Queue()

    async def pump(job: Job) -> None:
        items = generate(rt, job.tokens, job.sampling)
        try:
            async for item in items:
                queue.put_nowait((job.index, item))
            queue.put_nowait((job.index, None))
        except Exception as err:
            queue.put_nowait((job.index, err))
        finally:
            await items.aclose()

    tasks = [asyncio.create_task(pump(job)) for job in jobs]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        # Shielded: a second cancellation (anyio cancels a cancelled scope's task at every
        # await) must not reach the tasks while they close their decode streams.
        await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))


async def _placed(
    stream: AsyncGenerator[Item], choices: dict[int, Choice], started: float
) -> list[Item]:
    """Read until every choice is placed; the decode chunks read meanwhile are returned."""
    early: list[Item] = []
    while any(c.placed is None for c in choices.values()):
        index, item = await anext(stream)
        if isinstance(item, Placed):
            choices[index].placed = item
        else:
            early.append((index, item))
    return early


class ClosingStreamingResponse(StreamingResponse):
    """A `StreamingResponse` that closes its generator when the response ends however it
    ended: Starlette stops iterating on a disconnect (a failed send) but leaves the
    generator to the garbage collector, and with it the choices' decode streams."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            body = self.body_iterator
            if isinstance(body, AsyncGenerator):
                await body.aclose()


class ClientGone(Exception):
    """The client closed its connection before the response was ready."""


async def _or_gone(request: Request, work: Awaitable[_T]) -> _T:
    """`work`'s result, unless the client disconnects first: then `work` is cancelled (so
    its request is cancelled on the instances) and `ClientGone` is raised."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
    if gone.done() and not gone.cancelled() and not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise ClientGone
    with contextlib.suppress(asyncio.CancelledError):
        await gone
    return task.result()


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _response_id(is_chat: bool, request_id: str) -> str:
    """OpenAI's id shapes: `chatcmpl-...` for chat, `cmpl-...` for completions."""
    return ("chatcmpl-" if is_chat else "cmpl-") + request_id.removeprefix("cmpl-")


async def complete(rt: RouterRuntime, request: Request, is_chat: bool) -> Response:
    started = time.monotonic()
    stream: AsyncGenerator[Item] | None = None
    try:
        req, jobs = await _prepare(rt, request, is_chat)
        stream = _merged(rt, jobs)
        choices = {job.index: Choice(job) for job in jobs}
        early = await _or_gone(request, _placed(stream, choices, started))
        if req.stream:
            sse = _sse(rt, req, is_chat, choices, stream, early=early, started=started)
            stream = None  # the response owns it now
            return ClosingStreamingResponse(sse, media_type="text/event-stream")
        await _or_gone(request, _collect(rt, stream, choices, early, started))
    except ClientGone:
        rt.metrics.ended("cancelled", CLIENT_GONE_STATUS)
        return Response(status_code=CLIENT_GONE_STATUS)
    except AdmissionRejectedError as err:
        rt.metrics.ended("rejected", err.status_code)
        raise
    except ServeError as err:
        rt.metrics.ended("failed", err.status_code)
        raise
    except Exception:
        rt.metrics.ended("failed", 500)
        raise
    finally:
        if stream is not None:
            await stream.aclose()
    rt.metrics.ended("completed", 200)
    first = _first_placed(choices)
    body = envelope(
        is_chat,
        _response_id(is_chat, first.request_id),
        req.model,
        chunk=False,
        choices=[
            choice(
                is_chat,
                c.text,
                c.finish,
                delta=False,
                index=c.job.index,
                logprobs=_logprobs(req, is_chat, c.logprobs),
            )
            for c in sorted(choices.values(), key=lambda c: c.job.index)
        ],
        usage=_usage(choices),
        prfaas=_prfaas(choices),
    )
    return JSONResponse(body)


async def _replay(early: list[Item], stream: AsyncGenerator[Item]) -> AsyncIterator[Item]:
    """The items `_placed` read ahead, then the rest of the stream."""
    for item in early:
        yield item
    async for item in stream:
        yield item


def _first_placed(choices: dict[int, Choice]) -> Placed:
    placed = choices[0].placed
    assert placed is not None
    return placed


async def _collect(
    rt: RouterRuntime,
    stream: AsyncGenerator[Item],
    choices: dict[int, Choice],
    early: list[Item],
    started: float,
) -> None:
    """Every choice to its end; a choice retried before its first token is placed again."""

    async for index, item in _replay(early, stream):
        c = choices[index]
        if isinstance(item, Placed):
            c.placed = item
            continue
        c.add(item, started)
        if c.finish is not None:
            _observe(rt, c, time.monotonic() - started)


async def _sse(
    rt: RouterRuntime,
    req: AnyRequest,
    is_chat: bool,
    choices: dict[int, Choice],
    stream: AsyncGenerator[Item],
    *,
    early: list[Item],
    started: float,
) -> AsyncIterator[bytes]:
    """The SSE stream; its outcome (completed, failed, cancelled: the client went away and
    Starlette cancelled or closed this generator) is counted here."""
    response_id = _response_id(is_chat, _first_placed(choices).request_id)

    try:
        async for index, item in _replay(early, stream):
            c = choices[index]
            if isinstance(item, Placed):  # retried before its first token: placed again
                c.placed = item
                continue
            c.add(item, started)
            if c.finish is not None:
                _observe(rt, c, time.monotonic() - started)
            logprobs = None
            if item.logprob is not None:
                logprobs = _logprobs(req, is_chat, [item.logprob], c.streamed_chars)
                c.streamed_chars += len(item.logprob.token)
            if not item.text and item.finish_reason is None and logprobs is None:
                continue
            part = choice(
                is_chat, item.text, item.finish_reason, delta=True, index=index, logprobs=logprobs
            )
            extra = {"usage": _choice_usage(c)} if req.continuous_usage else {}
            yield _event(
                envelope(is_chat, response_id, req.model, chunk=True, choices=[part], **extra)
            )
    except ServeError as err:
        rt.metrics.ended("failed", err.status_code)
        yield _event(err.body())
        yield b"data: [DONE]\n\n"
        return
    except (asyncio.CancelledError, GeneratorExit):
        rt.metrics.ended("cancelled", CLIENT_GONE_STATUS)
        raise
    finally:
        await stream.aclose()  # a cancelled stream: close the decode calls now, not at GC
    rt.metrics.ended("completed", 200)
    if req.include_usage:
        yield _event(
            envelope(
                is_chat,
                response_id,
                req.model,
                chunk=True,
                choices=[],
                usage=_usage(choices),
                prfaas=_prfaas(choices),
            )
        )
    yield b"data: [DONE]\n\n"


def _logprobs(
    req: AnyRequest, is_chat: bool, entries: list[p.Logprob], text_offset: int = 0
) -> dict[str, Any] | None:
    """The choice's `logprobs` in the endpoint's shape (None when not asked for)."""
    num_top = req.num_logprobs
    if num_top is None:
        return None
    if is_chat:
        return chat_logprobs(entries)
    return completion_logprobs(entries, num_top, text_offset)


def _choice_usage(c: Choice) -> dict[str, Any]:
    """One choice's usage so far (a chunk's, with `continuous_usage_stats`)."""
    hit = c.placed.prefill.hit_tokens if c.placed is not None else 0
    return usage(len(c.job.tokens), c.completion_tokens, hit)


def _usage(choices: dict[int, Choice]) -> dict[str, Any]:
    firsts = [c for c in choices.values() if c.job.sample == 0 and c.placed is not None]
    return usage(
        sum(len(c.job.tokens) for c in firsts),
        sum(c.completion_tokens for c in choices.values()),
        sum(c.placed.prefill.hit_tokens for c in firsts if c.placed is not None),
    )


def _prfaas_fields(c: Choice) -> dict[str, Any]:
    placed = c.placed
    assert placed is not None
    d = placed.decision
    return {
        "path": d.path.value,
        "reason": d.reason.value,
        "prefill_instance": d.prefill_instance_id,
        "decode_instance": d.decode_instance_id,
        "kv_bytes": placed.prefill.kv_bytes,
        "hit_tokens": placed.prefill.hit_tokens,
        "moved_prefix_tokens": (placed.move or {}).get("hit_tokens", 0),
        "moved_kv_bytes": (placed.move or {}).get("kv_bytes", 0),
        "ttft_s": round(c.ttft_s, 6),
    }


def _prfaas(choices: dict[int, Choice]) -> dict[str, Any]:
    """Where the request ran: one choice's fields, or `{"choices": [...]}` for several."""
    ordered = sorted(choices.values(), key=lambda c: c.job.index)
    if len(ordered) == 1:
        return _prfaas_fields(ordered[0])
    return {"choices": [_prfaas_fields(c) for c in ordered]}


def _observe(rt: RouterRuntime, c: Choice, e2e_s: float) -> None:
    placed = c.placed
    assert placed is not None
    d = placed.decision
    rt.metrics.observe(
        d.path.value,
        c.ttft_s,
        e2e_s,
        c.completion_tokens,
        request_id=placed.request_id,
        reason=d.reason.value,
        prompt_tokens=placed.num_prompt_tokens,
    )


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"
