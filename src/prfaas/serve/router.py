"""The router process: OpenAI-compatible API over the PrfaaS-PD deployment (no torch here).

    POST /v1/completions, /v1/chat/completions   streaming (SSE) or not, with usage
    GET  /v1/models, /health, /metrics (Prometheus), /admin/state (JSON)
    POST /admin/instances/{name}/role {"role": "pd-prefill"|"pd-decode"}   flip (drain first)
    POST /admin/rebalance                                                  one slow-loop step now

The slow loop (`serve.rebalance`) steps every `rebalance.period_s` when enabled.

Every error leaves as OpenAI's error JSON; the status comes from the `ServeError` class
(errors.py), mapped in `_serve_error` only. A streamed request is placed and prefilled before
the response starts, so placement and prefill errors keep their HTTP status; a failure after
the first token ends the stream with an error event. When the client disconnects, Starlette
cancels the stream: closing the decode instance's stream makes it cancel the request there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from prfaas.serve import protocol as p
from prfaas.serve.config import Deployment, InstanceRole
from prfaas.serve.dashboard import register_dashboard
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


def _sampling(req: CompletionRequest | ChatCompletionRequest, max_tokens: int) -> p.Sampling:
    return p.Sampling(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        seed=req.seed or 0,
        stop=req.stops,
        ignore_eos=req.ignore_eos,
    )


async def _prepare(
    rt: RouterRuntime, request: Request, is_chat: bool
) -> tuple[CompletionRequest | ChatCompletionRequest, list[int], p.Sampling]:
    declared = request.headers.get("content-length")
    limit = rt.deployment.router.max_body_bytes
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"request body of {declared} bytes > {limit}")
    raw = await request.body()
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


async def _complete(rt: RouterRuntime, request: Request, is_chat: bool) -> Response:
    started = time.monotonic()
    req, tokens, sampling = await _prepare(rt, request, is_chat)
    items = generate(rt, tokens, sampling)
    placed = await anext(items)
    assert isinstance(placed, Placed)
    if req.stream:
        return StreamingResponse(
            _sse(rt, req, is_chat, placed, items, started=started), media_type="text/event-stream"
        )
    text, finish, completion_tokens, ttft_s = "", None, 0, 0.0
    async for chunk in items:
        if isinstance(chunk, Placed):  # retried before its first token: placed again
            placed = chunk
            continue
        if not ttft_s:
            ttft_s = time.monotonic() - started
        text += chunk.text
        if chunk.finish_reason is not None:
            finish, completion_tokens = chunk.finish_reason, chunk.num_completion_tokens
            text = chunk.full_text if chunk.full_text is not None else text
    _observe(rt, placed, ttft_s, time.monotonic() - started, completion_tokens)
    body = envelope(
        is_chat,
        placed.request_id,
        req.model,
        chunk=False,
        choices=[choice(is_chat, text, finish, delta=False)],
        usage=usage(len(tokens), completion_tokens),
        prfaas=_prfaas_fields(placed, ttft_s),
    )
    return JSONResponse(body)


async def _sse(
    rt: RouterRuntime,
    req: CompletionRequest | ChatCompletionRequest,
    is_chat: bool,
    placed: Placed,
    items: AsyncIterator[Placed | p.DecodeChunk],
    *,
    started: float,
) -> AsyncIterator[bytes]:
    ttft_s, completion_tokens = 0.0, 0
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
                    placed.request_id,
                    req.model,
                    chunk=True,
                    choices=[choice(is_chat, chunk.text, chunk.finish_reason, delta=True)],
                )
            )
    except ServeError as err:
        yield _event(err.body())
        yield b"data: [DONE]\n\n"
        return
    _observe(rt, placed, ttft_s, time.monotonic() - started, completion_tokens)
    if req.include_usage:
        yield _event(
            envelope(
                is_chat,
                placed.request_id,
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


def build_app(deployment: Deployment) -> FastAPI:
    holder: dict[str, RouterRuntime] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(timeout=10.0) as client:
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

    def runtime() -> RouterRuntime:
        return holder["rt"]

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, err: ServeError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status_code)

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
    config = uvicorn.Config(build_app(deployment), host=r.host, port=r.port, log_level="warning")
    uvicorn.Server(config).run()
