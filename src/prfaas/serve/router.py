"""The router process: OpenAI-compatible API over the PrfaaS-PD deployment (no torch here).

    POST /v1/completions, /v1/chat/completions   streaming (SSE) or not, with usage
    GET  /v1/models, /health, /metrics (Prometheus), /admin/state (JSON)
    POST /admin/instances/{name}/role {"role": "pd-prefill"|"pd-decode"}   flip (drain first)
    POST /admin/rebalance                                                  one slow-loop step now

The slow loop (`serve.rebalance`) steps every `rebalance.period_s` when enabled.
`/admin/*` needs the admin bearer token, `/v1/*` the API key when one is set
(`serve.admin_auth`); every call to an instance is signed (`serve.control_auth`).

Every body is read, bounded and timed by `serve.edge.EdgeGuard` before a route runs (and any
error a route lets escape becomes a JSON 500 there); headers have their own deadline
(`header_timeout_protocol`). Every error leaves as OpenAI's error JSON; the status comes from
the `ServeError` class (errors.py), mapped in `_serve_error` only. A streamed request is
placed and prefilled before the response starts, so placement and prefill errors keep their
HTTP status; a failure after the first token ends the stream with an error event.

A client that disconnects cancels its request: Starlette cancels a stream, and a JSON request
races its work against the disconnect (`_or_gone`). Either way the flow's generator is
closed, which closes the decode instance's stream, which cancels the request there (its slot
and pages freed). Each request is counted once by how it ended (`RouterMetrics.ended`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from prfaas.serve import protocol as p
from prfaas.serve.admin_auth import BearerAuth, admin_token, router_guards
from prfaas.serve.admission import AdmissionRejectedError
from prfaas.serve.config import Deployment, InstanceRole, configured_api_key, transfer_secret
from prfaas.serve.control_auth import ControlSigner
from prfaas.serve.dashboard import register_dashboard
from prfaas.serve.edge import EdgeGuard, header_timeout_protocol
from prfaas.serve.errors import (
    BadRequestError,
    ConflictError,
    ModelNotFoundError,
    NotFoundError,
    PayloadTooLargeError,
    ServeError,
    error_body,
)
from prfaas.serve.flow import Placed, RouterRuntime, check_length, generate, tokenize
from prfaas.serve.metrics import RouterMetrics
from prfaas.serve.openai_api import (
    ChatCompletionRequest,
    CompletionRequest,
    choice,
    envelope,
    parse_body,
    usage,
)
from prfaas.serve.rebalance import admin_view
from prfaas.serve.registry import Registry

DEFAULT_MAX_TOKENS = 16
_T = TypeVar("_T")
MAX_HEADER_BYTES = 16 * 1024  # h11's default, stated: request line plus headers


def _sampling(req: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> p.Sampling:
    return p.Sampling(
        max_tokens=max_tokens,
        temperature=req.sampling_temperature,
        top_p=req.top_p,
        top_k=req.sampling_top_k,
        seed=req.seed or 0,
        stop=req.stops,
        ignore_eos=req.ignore_eos,
    )


async def _prepare(
    rt: RouterRuntime, request: Request, is_chat: bool
) -> tuple[CompletionRequest | ChatCompletionRequest, list[int], p.Sampling]:
    limit = rt.deployment.router.max_body_bytes
    raw = await request.body()  # read and bounded by serve.edge.EdgeGuard
    kind: type[CompletionRequest | ChatCompletionRequest]
    kind = ChatCompletionRequest if is_chat else CompletionRequest
    req = parse_body(raw, kind, limit)
    if req.model != rt.deployment.model_name:
        raise ModelNotFoundError(f"the model {req.model!r} does not exist")
    tokens = await tokenize(rt, req.text)
    wanted = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        wanted = req.max_completion_tokens
    max_tokens = wanted if wanted is not None else DEFAULT_MAX_TOKENS
    check_length(rt, tokens, max_tokens)
    return req, tokens, _sampling(req, max_tokens)


def _prfaas_fields(placed: Placed, ttft_s: float) -> dict[str, Any]:
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
        "ttft_s": round(ttft_s, 6),
    }


class ClientGone(Exception):
    """The client closed its connection before the response was ready."""


CLIENT_GONE_STATUS = 499  # nginx's "client closed request": nobody reads it


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


async def _complete(rt: RouterRuntime, request: Request, is_chat: bool) -> Response:
    started = time.monotonic()
    try:
        req, tokens, sampling = await _prepare(rt, request, is_chat)
        items = generate(rt, tokens, sampling)
        first = await _or_gone(request, anext(items))
        assert isinstance(first, Placed)
        if req.stream:
            return StreamingResponse(
                _sse(rt, req, is_chat, first, items, started=started),
                media_type="text/event-stream",
            )
        placed, text, finish, completion_tokens, ttft_s = await _or_gone(
            request, _collect(items, first, started)
        )
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
    rt.metrics.ended("completed", 200)
    _observe(rt, placed, ttft_s, time.monotonic() - started, completion_tokens)
    body = envelope(
        is_chat,
        _response_id(is_chat, placed.request_id),
        req.model,
        chunk=False,
        choices=[choice(is_chat, text, finish, delta=False)],
        usage=usage(len(tokens), completion_tokens),
        prfaas=_prfaas_fields(placed, ttft_s),
    )
    return JSONResponse(body)


async def _collect(
    items: AsyncGenerator[Placed | p.DecodeChunk], placed: Placed, started: float
) -> tuple[Placed, str, str | None, int, float]:
    """(placement, text, finish reason, completion tokens, TTFT) of a request's decode
    chunks; a request retried before its first token is placed again (a new `Placed`)."""
    text, finish, completion_tokens, ttft_s = "", None, 0, 0.0
    async for chunk in items:
        if isinstance(chunk, Placed):
            placed = chunk
            continue
        if not ttft_s:
            ttft_s = time.monotonic() - started
        text += chunk.text
        if chunk.finish_reason is not None:
            finish, completion_tokens = chunk.finish_reason, chunk.num_completion_tokens
            text = chunk.full_text if chunk.full_text is not None else text
    return placed, text, finish, completion_tokens, ttft_s


async def _sse(
    rt: RouterRuntime,
    req: CompletionRequest | ChatCompletionRequest,
    is_chat: bool,
    placed: Placed,
    items: AsyncGenerator[Placed | p.DecodeChunk],
    *,
    started: float,
) -> AsyncIterator[bytes]:
    """The SSE stream; its outcome (completed, failed, cancelled: the client went away and
    Starlette cancelled or closed this generator) is counted here."""
    ttft_s, completion_tokens = 0.0, 0
    response_id = _response_id(is_chat, placed.request_id)
    try:
        async for chunk in items:
            if isinstance(chunk, Placed):  # retried before its first token: placed again
                placed = chunk
                continue
            if not ttft_s:
                ttft_s = time.monotonic() - started
            completion_tokens = chunk.num_completion_tokens or completion_tokens
            if not chunk.text and chunk.finish_reason is None:
                continue
            yield _event(
                envelope(
                    is_chat,
                    response_id,
                    req.model,
                    chunk=True,
                    choices=[choice(is_chat, chunk.text, chunk.finish_reason, delta=True)],
                )
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
        await items.aclose()  # a cancelled stream: close the decode call now, not at GC
    rt.metrics.ended("completed", 200)
    _observe(rt, placed, ttft_s, time.monotonic() - started, completion_tokens)
    if req.include_usage:
        yield _event(
            envelope(
                is_chat,
                response_id,
                req.model,
                chunk=True,
                choices=[],
                usage=usage(placed.num_prompt_tokens, completion_tokens),
                prfaas=_prfaas_fields(placed, ttft_s),
            )
        )
    yield b"data: [DONE]\n\n"


def _observe(
    rt: RouterRuntime, placed: Placed, ttft_s: float, e2e_s: float, completion_tokens: int
) -> None:
    d = placed.decision
    rt.metrics.observe(
        d.path.value,
        ttft_s,
        e2e_s,
        completion_tokens,
        request_id=placed.request_id,
        reason=d.reason.value,
        prompt_tokens=placed.num_prompt_tokens,
    )


def _event(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _admin_state(rt: RouterRuntime) -> dict[str, Any]:
    link = rt.registry.link_view()
    netns = rt.deployment.link.netns
    return {
        "t_s": round(rt.now_s(), 3),
        "model": rt.deployment.model_name,
        "threshold_tokens": rt.threshold_tokens,
        "instances": [
            {
                "name": i.name,
                "role": i.role.value,
                "configured_role": i.spec.role.value,
                "draining": i.is_draining,
                "flip_to": i.flip_to.value if i.flip_to is not None else None,
                "inflight": i.inflight,
                "cluster": i.spec.cluster,
                "url": i.spec.url,
                "healthy": i.is_healthy,
                "restarts": i.restarts,
                "running": i.num_running,
                "waiting": i.num_waiting,
                "free_pages": i.free_pages,
                "cache_events_applied": i.next_seq,
                "indexed_cache_blocks": rt.registry.indexed_blocks(i.name),
            }
            for i in rt.registry.instances.values()
        ],
        "link": {
            "shaping": rt.deployment.link.shaping_in_force,
            "shaping_reason": rt.deployment.link.shaping_reason,
            "netns": netns.model_dump() if netns is not None else None,
            "capacity_bytes_per_s": link.capacity_bytes_per_s,
            "egress_bytes_per_s": link.egress_bytes_per_s,
            "bytes_waiting": link.bytes_waiting,
            "rtt_s": link.rtt_s,
            "utilisation": link.utilisation,
        },
        "reasons": dict(rt.scheduler.reasons) if rt.registry.healthy() else {},
        "recent_decisions": list(rt.recent),
        "rebalance": admin_view(rt.slow_loop),
    }


def _role(raw: bytes, max_body_bytes: int) -> InstanceRole:
    """The role of a flip request's body `{"role": ...}` (400 on anything else)."""
    if len(raw) > max_body_bytes:
        raise PayloadTooLargeError(f"request body of {len(raw)} bytes > {max_body_bytes}")
    try:
        body = p.RoleRequest.model_validate_json(raw)
        return InstanceRole(body.role)
    except (ValidationError, ValueError):
        roles = ", ".join(r.value for r in InstanceRole)
        raise BadRequestError(f'the body must be {{"role": ROLE}}, ROLE one of {roles}') from None


def _admin_routes(app: FastAPI, runtime: Callable[[], RouterRuntime]) -> None:
    @app.post("/admin/instances/{name}/role", status_code=202)
    async def flip_role(name: str, request: Request) -> dict[str, Any]:
        """Drain instance `name`, then switch it to the body's role (202: the flip started;
        follow it in /admin/state `rebalance.flips`)."""
        rt = runtime()
        role = _role(await request.body(), rt.deployment.router.max_body_bytes)
        if name not in rt.registry.instances:
            raise NotFoundError(f"no instance named {name!r}")
        return rt.slow_loop.request_flip(rt, name, role, trigger="admin")

    @app.post("/admin/rebalance")
    async def rebalance_now() -> dict[str, Any]:
        """One slow-loop step now, whatever the period (the actions it took)."""
        rt = runtime()
        if not rt.deployment.rebalance.enabled:
            raise ConflictError("the slow loop is disabled (rebalance.enabled: false)")
        return {"actions": rt.slow_loop.step(rt), "threshold_tokens": rt.threshold_tokens}


def _refused(holder: dict[str, RouterRuntime], path: str, status: int) -> None:
    """A completions request refused at the edge (413, 415, 408) ends `failed` too."""
    if path.startswith("/v1/") and "rt" in holder:
        holder["rt"].metrics.ended("failed", status)


def build_app(deployment: Deployment) -> FastAPI:
    holder: dict[str, RouterRuntime] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        signer = ControlSigner(transfer_secret(deployment))
        async with httpx.AsyncClient(timeout=10.0, auth=signer) as client:
            registry = Registry(deployment, client)
            rt = RouterRuntime(deployment, registry, RouterMetrics(), client)
            holder["rt"] = rt
            await registry.poll_once()
            poller = asyncio.create_task(registry.run())
            slow = asyncio.create_task(rt.slow_loop.run(rt))
            try:
                yield
            finally:
                poller.cancel()
                slow.cancel()
                await rt.slow_loop.close()

    app = FastAPI(lifespan=lifespan)
    r = deployment.router
    app.add_middleware(
        EdgeGuard,
        max_body_bytes=r.max_body_bytes,
        body_timeout_s=r.body_timeout_s,
        on_refused=lambda path, status: _refused(holder, path, status),
    )
    token = admin_token(deployment, announce=True)
    guards = router_guards(token, configured_api_key(deployment))
    app.add_middleware(BearerAuth, guarded=guards)

    def runtime() -> RouterRuntime:
        return holder["rt"]

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, err: ServeError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status_code)

    @app.exception_handler(AdmissionRejectedError)
    async def _admission_rejected(_: Request, err: AdmissionRejectedError) -> JSONResponse:
        return err.response()  # 429 with Retry-After

    @app.exception_handler(404)
    async def _not_found(_: Request, __: Exception) -> JSONResponse:
        return JSONResponse(error_body("no such route", "invalid_request_error"), 404)

    @app.exception_handler(405)
    async def _not_allowed(_: Request, __: Exception) -> JSONResponse:
        return JSONResponse(error_body("method not allowed", "invalid_request_error"), 405)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _complete(runtime(), request, is_chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _complete(runtime(), request, is_chat=True)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        name = deployment.model_name
        card = {"id": name, "object": "model", "created": 0, "owned_by": "prfaas"}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 "ok": every instance is up; 200 "degraded": some are down but a prefill and a
        decode instance serve; 503: requests cannot be served."""
        rt = runtime()
        healthy = rt.registry.healthy()
        roles = {i.role for i in healthy}
        can_serve = any(r.is_prefill for r in roles) and any(not r.is_prefill for r in roles)
        status = "ok" if len(healthy) == len(rt.registry.instances) else "degraded"
        body = {"status": status if can_serve else "unavailable", "healthy": len(healthy)}
        return JSONResponse(body, status_code=200 if can_serve else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        rt = runtime()
        data = rt.metrics.render(rt.registry, rt.threshold_tokens)
        return Response(data, media_type="text/plain; version=0.0.4")

    @app.get("/admin/state")
    async def admin_state() -> dict[str, Any]:
        return _admin_state(runtime())

    _admin_routes(app, runtime)
    register_dashboard(app, runtime)
    return app


def serve_router(deployment: Deployment) -> None:
    """Run the router until SIGINT/SIGTERM."""
    r = deployment.router
    config = uvicorn.Config(
        build_app(deployment),
        host=r.host,
        port=r.port,
        log_level="warning",
        http=header_timeout_protocol(r.header_timeout_s),
        timeout_keep_alive=max(1, round(r.keep_alive_timeout_s)),
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    uvicorn.Server(config).run()
