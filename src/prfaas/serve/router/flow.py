"""One request through the deployment: place, prefill (KV streams to decode), decode, stream.

    prompt ids (`prompt_tokens`)  ->  scheduler.route(RouteRequest, registry.view(now))
        -> POST prefill instance /prefill   (KV: prefill -> decode over the transfer layer,
                                             with the prompt's ids: `_prompt_rides_kv`)
        -> POST decode instance /decode     (JSON lines of tokens: serve.json_lines)
                                            -> yielded to the HTTP edge

Every call to an instance goes through the runtime's `InstanceClient`
(`serve.router.instance_client`): over HTTP in the router, in process in unit tests.

The scheduler object is the simulator's, unchanged, fed with wall time since router start,
and assembled by the same function from the same schema (`scheduler.assemble`; the file's
`policy` names its routing policy).
It is told that this host moves cached prefixes across clusters (`can_move_cache`) when every
instance's backend can (torch; vLLM on dense models) and `router.cache_moves` is on: a
decision with a `CacheMove` first has the holder ship the prefix to the prefill instance
(`_move`), then prefills there.
The prefix the decode instance holds is read from the router's own index of its cache events
(`_decode_holds`; no call), and the prefill ships attention KV only from there (`from_token`).
An index a poll behind (the decode instance evicted the prefix since) fails that decode, which
is retried like any failed attempt, elsewhere and without the reuse.
Failures before the first token reaches the client are retried (at most `MAX_ATTEMPTS`),
and every failure is classified first (`AttemptFailed`), because "this request failed" and
"this instance is down" are different things:

    RequestFailed   the instance answered (a 5xx, a broken-off decode stream, an error line)
                    or a call broke but the instance answers its health probe right after
                    (a stale keep-alive connection): the instance stays in service
    InstanceDown    a transport failure (refused, reset, timed out) and the health probe
                    (`Registry.probe`, a fresh GET /state) fails too: `mark_failed`
    InstanceFull    the decode instance's KV receive buffer had no room (the prefill's 503
                    `kv_buffer_full`): nothing held against it; 503, not 502, when no
                    other decode instance can take the request

A 4xx from an instance is the request's own error (`from_response`), passed on, never
retried and never held against the instance. A retry never returns to an instance that
failed the same request (`excluded`; none left: 502 with the last failure), whose own
failures count against it (`serve.router.breaker`); tokenizer calls fall back the same way
(`serve.router.prompt_tokens`). After
the first token a failure ends the request with `InstanceFailedError` (502). The ledger is
always released (prefill_done / decode_done, also when the prefill fails). An attempt that
ends without completing, at any stage, is cancelled on its instances (`serve.router.release`,
`POST /cancel`: prefill call, engine work, arrived KV). Concurrent decisions moving one prefix
between the same two instances share one move (`RouterRuntime.moves`).

Every attempt's record in `/admin/state` (`recent_decisions`) ends `completed`, `failed`
(with `error`; `retried: true` when another attempt followed) or `cancelled` (the client went
away: the decode stream to the instance is closed, which frees its slot and KV there).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import GlobalScheduler, RouteDecision, RouteRequest
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment
from prfaas.serve.errors import (
    BadRequestError,
    ContextLengthError,
    InstanceFailedError,
    KvBufferFullError,
    NoCapacityError,
    from_response,
)
from prfaas.serve.json_lines import split_lines
from prfaas.serve.router.admission import route_admitted
from prfaas.serve.router.attempts import (
    AttemptFailed,
    InstanceDown,
    InstanceFull,
    RequestFailed,
    judge,
    unless_down,
)
from prfaas.serve.router.instance_client import (
    CallBroke,
    CallRefused,
    InstanceCallError,
    InstanceClient,
)
from prfaas.serve.router.lease import LeaseKeeper
from prfaas.serve.router.live_scheduler import build_scheduler
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.prompt_tokens import PromptTokenizer
from prfaas.serve.router.rebalance import SlowLoop
from prfaas.serve.router.registry import LiveInstance, Registry
from prfaas.serve.router.release import cancel_on
from prfaas.serve.router.single_flight import SingleFlight

MAX_ATTEMPTS = 3
MoveKey = tuple[str, str, tuple[int, ...]]  # holder, target, the prefix's tokens
MAX_RECENT_DECISIONS = 200
MAX_ERROR_CHARS = 300


@dataclass(slots=True)
class RouterRuntime:
    """Everything the router holds (built once in `router.build_app`; no globals)."""

    deployment: Deployment
    registry: Registry
    metrics: RouterMetrics
    client: InstanceClient
    started_s: float = field(default_factory=time.monotonic)
    recent: deque[dict[str, Any]] = field(
        default_factory=lambda: deque(maxlen=MAX_RECENT_DECISIONS)
    )
    slow_loop: SlowLoop = field(init=False)
    prompts: PromptTokenizer = field(init=False)  # prompt ids (serve.router.prompt_tokens)
    lease: LeaseKeeper = field(init=False)  # who runs the slow loop (serve.router.lease)
    moves: SingleFlight[MoveKey, dict[str, Any]] = field(default_factory=SingleFlight)
    background: set[asyncio.Task[None]] = field(default_factory=set)  # `/cancel` calls
    _scheduler: GlobalScheduler | None = None

    def __post_init__(self) -> None:
        self.slow_loop = SlowLoop(self.deployment.rebalance)
        self.prompts = PromptTokenizer(self.deployment, self.client, self.registry)
        self.lease = LeaseKeeper(self.deployment, self.metrics.registry, self.registry.replica_id)

    def now_s(self) -> float:
        return time.monotonic() - self.started_s

    @property
    def scheduler(self) -> GlobalScheduler:
        """Built on first use (`live_scheduler.build_scheduler`: it needs the instances'
        published timing)."""
        if self._scheduler is None:
            self._scheduler = build_scheduler(self.deployment, self.registry, self.can_move_cache)
            self.registry.ledger = self._scheduler.ledger  # other replicas' load goes there
        return self._scheduler

    def follow(self, threshold_tokens: int | None) -> None:
        """Route with the lease holder's t (this replica does not run the slow loop)."""
        if self._scheduler is not None:
            self._scheduler.follow(threshold_tokens)

    @property
    def can_move_cache(self) -> bool:
        """Whether the router carries out `CacheMove`s: `router.cache_moves` is on and every
        instance's backend can export and import prefixes (torch; vLLM on dense models)."""
        infos = [i.info for i in self.registry.instances.values() if i.info is not None]
        able = bool(infos) and all(info.capabilities.moves_prefixes for info in infos)
        return self.deployment.router.cache_moves and able  # one backend per deployment

    @property
    def threshold_tokens(self) -> int:
        """t, as its owner (the scheduler) has it; the t it will start from until it is built."""
        if self._scheduler is None:
            return self.deployment.threshold_tokens
        return self._scheduler.threshold_tokens


@dataclass(frozen=True, slots=True)
class Placed:
    """First item of a request's stream: where it ran and what its prefill cost."""

    request_id: str
    decision: RouteDecision
    prefill: p.PrefillResult
    num_prompt_tokens: int
    move: dict[str, Any] | None = None  # the cross-cluster prefix move done first, if any


def context_tokens(rt: RouterRuntime) -> int:
    """The served model's context (503 while no instance has reported it: the request is not
    to blame for what the router does not know yet)."""
    context = rt.registry.max_context_tokens()
    if context is None:
        raise NoCapacityError("no instance has registered yet: the model's context is unknown")
    return context


def check_length(rt: RouterRuntime, tokens: list[int], max_tokens: int) -> None:
    context = context_tokens(rt)
    if len(tokens) + max_tokens > context:
        raise ContextLengthError(
            f"prompt of {len(tokens)} tokens + max_tokens {max_tokens} exceeds the model's "
            f"context of {context} tokens"
        )


def check_token_ids(rt: RouterRuntime, token_ids: list[int], where: str = "prompt") -> None:
    """Token ids the served vocabulary has (400 otherwise: an id past the embedding table
    would fail the engine's whole batch)."""
    vocab = rt.registry.vocab_size()
    if vocab is not None and any(t >= vocab for t in token_ids):
        bad = next(t for t in token_ids if t >= vocab)
        raise BadRequestError(
            f"{where}: token id {bad} is not in the vocabulary ({vocab} ids)",
            param=where.split(maxsplit=1)[0],
        )


async def generate(
    rt: RouterRuntime, tokens: list[int], sampling: p.Sampling
) -> AsyncGenerator[Placed | p.DecodeChunk]:
    """Placed, then DecodeChunks; retried on a failed attempt until a token is out, never
    on an instance that failed this request already."""
    excluded: set[str] = set()
    last, was_full = "", False
    for attempt in range(MAX_ATTEMPTS):
        request_id = f"cmpl-{uuid.uuid4().hex[:24]}"
        emitted = False
        records: list[dict[str, Any]] = []
        try:
            async for item in _attempt(
                rt, request_id, tokens, sampling, records=records, excluded=excluded
            ):
                if isinstance(item, p.DecodeChunk):
                    emitted = True
                yield item
            return
        except NoCapacityError:
            if not excluded:
                raise  # else: every instance that could take it has failed it
            if was_full:
                raise NoCapacityError(f"{last}; no other instance has room now") from None
            rt.metrics.failures.labels("request").inc()
            raise InstanceFailedError(f"{last}; no other instance can take it") from None
        except AttemptFailed as err:
            kind = "instance" if isinstance(err, InstanceDown) else "request"
            excluded.add(err.instance)
            if isinstance(err, RequestFailed):
                rt.registry.request_failed(err.instance)
            was_full, last = isinstance(err, InstanceFull), str(err)
            if emitted or attempt == MAX_ATTEMPTS - 1:
                rt.metrics.failures.labels(kind).inc()
                raise (NoCapacityError if was_full else InstanceFailedError)(last) from None
            rt.metrics.failures.labels("retried").inc()
            for record in records:
                record["retried"] = True
            if isinstance(err, InstanceDown):
                await rt.registry.poll_once()


async def _attempt(
    rt: RouterRuntime,
    request_id: str,
    tokens: list[int],
    sampling: p.Sampling,
    *,
    records: list[dict[str, Any]],
    excluded: set[str],
) -> AsyncIterator[Placed | p.DecodeChunk]:
    hits = rt.registry.hit_tokens(tokens)
    route = RouteRequest(RequestId(request_id), len(tokens), sampling.max_tokens, hits)
    decision = await route_admitted(rt, route, frozenset(excluded))  # 429, deferral, 503
    record = _record(rt, decision, len(tokens))
    records.append(record)
    rt.metrics.decisions.labels(decision.path.value, decision.reason.value).inc()
    prefill = rt.registry.instances[decision.prefill_instance_id]
    decode = rt.registry.instances[decision.decode_instance_id]
    prefill.inflight += 1  # a draining instance waits for these (serve.router.rebalance)
    decode.inflight += 1
    try:
        if decision.cache_move is not None:
            record["move"] = await _move(rt, decision, tokens)
        result = await _prefill(rt, decision, tokens, sampling)
    except BaseException as err:
        _ended(record, err)
        cancel_on(rt.client, rt.background, decision.request_id, _urls(prefill, decode))
        rt.scheduler.decode_done(decision.request_id)  # releases the prefill stage too
        _leave(prefill)
        _leave(decode)
        raise
    rt.scheduler.prefill_done(decision.request_id)
    _leave(prefill)
    try:
        record.update(kv_bytes=result.kv_bytes, hit_tokens=result.hit_tokens)
        rt.metrics.kv_bytes.labels(decision.path.value).inc(result.kv_bytes)
        rt.metrics.hit_tokens.labels(decision.path.value).inc(result.hit_tokens)
        yield Placed(request_id, decision, result, len(tokens), record.get("move"))
        first_logprob = result.first_logprob  # the prefill instance sampled the first token
        async for chunk in _decode(rt, decision, tokens, result, sampling):
            if first_logprob is not None and chunk.token_id is not None:
                if chunk.logprob is None:
                    yield chunk.model_copy(update={"logprob": first_logprob})
                    first_logprob = None
                    continue
                first_logprob = None
            yield chunk
        record["status"] = "completed"
        rt.registry.request_served(prefill.name, decode.name)
    except BaseException as err:
        _ended(record, err)
        cancel_on(rt.client, rt.background, decision.request_id, _urls(decode))  # its KV
        raise
    finally:
        rt.scheduler.decode_done(decision.request_id)
        _leave(decode)


async def _move(rt: RouterRuntime, decision: RouteDecision, tokens: list[int]) -> dict[str, Any]:
    """Carry out the decision's `CacheMove`, joining the same move (holder, target, prefix)
    when another request started it already (`joined: true` in its record; counted in
    `prfaas:cache_move_joins_total`, not as a move)."""
    move = decision.cache_move
    assert move is not None
    key = (move.source_instance_id, decision.prefill_instance_id, tuple(tokens[: move.tokens]))
    out, joined = await rt.moves.run(key, lambda: _move_once(rt, decision, tokens))
    if not joined:
        return out
    rt.metrics.cache_move_joins.inc()
    return {**out, "joined": True}


async def _move_once(
    rt: RouterRuntime, decision: RouteDecision, tokens: list[int]
) -> dict[str, Any]:
    """The holder ships its restorable prefix over the inter-cluster link to the prefill
    instance, which inserts it into its pool, so the prefill that follows hits it. A failed
    move is reported, never fatal: the prefill then runs cold (the same tokens, more
    compute)."""
    move = decision.cache_move
    assert move is not None
    source = rt.registry.instances[move.source_instance_id]
    target = rt.registry.instances[decision.prefill_instance_id]
    out: dict[str, Any] = {"source": source.name, "target": target.name, "asked": move.tokens}
    if target.info is None:
        out["status"] = "failed"
        return out
    move_id = f"move-{uuid.uuid4().hex[:24]}"
    send = p.PrefixSendRequest(
        move_id=move_id,
        token_ids=tokens,
        max_tokens=move.tokens,
        target_transfer_host=target.info.transfer_host,
        target_transfer_port=target.info.transfer_port,
    )
    timeout_s = rt.deployment.router.request_timeout_s
    source.inflight += 1
    try:
        sent = await rt.client.prefix_send(source.spec.url, send, timeout_s=timeout_s)
        out.update(tokens=sent.tokens, kv_bytes=sent.kv_bytes)
        hit = 0
        if sent.tokens:
            body = p.PrefixImportRequest(move_id=move_id, token_ids=tokens[: sent.tokens])
            imported = await rt.client.prefix_import(target.spec.url, body, timeout_s=timeout_s)
            hit = imported.hit_tokens
        out.update(status="done" if hit else "nothing-moved", hit_tokens=hit)
    except (InstanceCallError, ValueError) as err:
        out.update(status="failed", error=str(err)[:200])
    finally:
        _leave(source)
    rt.metrics.cache_moves.labels(out["status"]).inc()
    rt.metrics.cache_move_bytes.inc(out.get("kv_bytes", 0))
    rt.metrics.cache_move_tokens.inc(out.get("hit_tokens", 0))
    return out


def _ended(record: dict[str, Any], err: BaseException) -> None:
    """Close an attempt's record on `err`: `cancelled` when the client went away (the task
    was cancelled or the stream closed), else `failed` with the reason."""
    if isinstance(err, asyncio.CancelledError | GeneratorExit):
        record["status"] = "cancelled"
        return
    record["status"] = "failed"
    record["error"] = str(err)[:MAX_ERROR_CHARS] or type(err).__name__


def _urls(*instances: LiveInstance) -> list[str]:
    return [inst.spec.url for inst in instances]


def _leave(inst: LiveInstance) -> None:
    inst.inflight = max(0, inst.inflight - 1)


def _record(rt: RouterRuntime, decision: RouteDecision, num_tokens: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request_id": decision.request_id,
        "t_s": round(rt.now_s(), 4),
        "path": decision.path.value,
        "reason": decision.reason.value,
        "mode": decision.mode.value if decision.mode else None,
        "prefill_instance": decision.prefill_instance_id,
        "decode_instance": decision.decode_instance_id,
        "input_tokens": num_tokens,
        "reused_prefix_tokens": decision.reused_prefix_tokens,
        "uncached_tokens": decision.uncached_tokens,
        "threshold_tokens": rt.threshold_tokens,
        "status": "running",
    }
    rt.recent.append(record)
    return record


async def _prefill(
    rt: RouterRuntime, decision: RouteDecision, tokens: list[int], sampling: p.Sampling
) -> p.PrefillResult:
    prefill = rt.registry.instances[decision.prefill_instance_id]
    decode = rt.registry.instances[decision.decode_instance_id]
    if decode.info is None:
        raise RequestFailed(f"decode instance {decode.name} is not registered", decode.name)
    from_token = _decode_holds(rt, decode, tokens)
    body = p.PrefillRequest(
        request_id=decision.request_id,
        token_ids=tokens,
        sampling=sampling,
        decode_transfer_host=decode.info.transfer_host,
        decode_transfer_port=decode.info.transfer_port,
        from_token=from_token,
        router=rt.registry.replica_id,
        work_s=rt.scheduler.ledger.prefill_estimate_s(decision.request_id),
    )
    timeout_s = rt.deployment.router.request_timeout_s
    try:
        call = rt.client.prefill(prefill.spec.url, body, timeout_s=timeout_s)
        return await unless_down(prefill, "prefill", call)
    except CallBroke as err:
        raise await judge(rt.registry, prefill, "prefill", err) from None
    except CallRefused as err:
        refused = from_response(err.status_code, err.body)
        if err.status_code < 500:
            raise refused from None
        if refused.code == KvBufferFullError.code:
            raise InstanceFull(f"prefill on {prefill.name}: {refused}", decode.name) from None
        raise RequestFailed(f"prefill on {prefill.name}: {err.message}", prefill.name) from None


def _decode_holds(rt: RouterRuntime, decode: LiveInstance, tokens: list[int]) -> int:
    """The prompt tokens the decode instance can take from its own pool, as the router's
    index of its cache events has them: the prefill ships only the rest. A backend that
    imports prefixes (`capabilities.moves_prefixes`: torch; vLLM on dense models) joins a
    shipped tail to any attention KV it holds; one that only reports its cache (vLLM on a
    hybrid model) hits by its engine's rule, a restorable prefix (attention and a state
    snapshot at its end).
    0 for any other backend, or with `router.decode_reuse` off."""
    if decode.info is None or not rt.deployment.router.decode_reuse:
        return 0
    if decode.info.capabilities.moves_prefixes:
        return rt.registry.attention_tokens(decode.name, tokens)
    if decode.info.capabilities.reports_cached_prefix:
        return rt.registry.hit_tokens(tokens).get(InstanceId(decode.name), 0)
    return 0


async def _decode(
    rt: RouterRuntime,
    decision: RouteDecision,
    tokens: list[int],
    prefilled: p.PrefillResult,
    sampling: p.Sampling,
) -> AsyncIterator[p.DecodeChunk]:
    decode = rt.registry.instances[decision.decode_instance_id]
    prefill = rt.registry.instances[decision.prefill_instance_id]
    body = p.DecodeCall(
        request_id=decision.request_id,
        token_ids=None if _prompt_rides_kv(prefill, decode) else tokens,
        first_token=prefilled.first_token,
        sampling=sampling,
        first_finish_reason=prefilled.first_finish_reason,
        router=rt.registry.replica_id,
    )
    timeout_s = rt.deployment.router.request_timeout_s
    try:
        async with rt.client.decode(decode.spec.url, body, timeout_s=timeout_s) as stream:
            is_final = is_started = False
            async for line in split_lines(stream):
                chunk = _chunk(line, decode, is_started)
                if chunk.error is not None and not is_started:
                    raise RequestFailed(f"decode on {decode.name}: {chunk.error}", decode.name)
                if chunk.error is not None:
                    raise InstanceFailedError(f"decode on {decode.name}: {chunk.error}")
                is_started = True
                yield chunk
                if chunk.finish_reason is not None:
                    is_final = True
            if not is_final:
                message = f"decode instance {decode.name} broke off the stream"
                raise RequestFailed(message, decode.name)
    except CallBroke as err:
        raise await judge(rt.registry, decode, "decode", err) from None
    except CallRefused as err:
        if err.status_code >= 500:
            raise RequestFailed(f"decode on {decode.name}: {err.message}", decode.name) from None
        raise from_response(err.status_code, err.body) from None


def _prompt_rides_kv(prefill: LiveInstance, decode: LiveInstance) -> bool:
    """Whether the prompt's ids reach the decode instance with the KV (the prefill instance
    sends them in the request's transfer stream, the decode instance takes them from there:
    both declare `prompt_in_kv_stream`), so `/decode` leaves them out and a long prompt
    leaves the router once. Else (vLLM, whose engine request needs them) `/decode` has them."""
    infos = (prefill.info, decode.info)
    return all(info is not None and info.capabilities.prompt_in_kv_stream for info in infos)


def _chunk(line: bytes, decode: LiveInstance, is_started: bool) -> p.DecodeChunk:
    """One line of the decode stream; a line that is no `DecodeChunk` fails the request as
    a broken stream does (retried while nothing was sent), never as the router's own 500."""
    try:
        return p.DecodeChunk.model_validate_json(line)
    except ValidationError:
        what = f"decode on {decode.name}: not a DecodeChunk line: {line[:80]!r}"
        raise (
            InstanceFailedError(what) if is_started else RequestFailed(what, decode.name)
        ) from None
