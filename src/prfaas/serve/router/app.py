"""The router process: OpenAI-compatible API over the PrfaaS-PD deployment (no torch here).

    POST /v1/completions, /v1/chat/completions   streaming (SSE) or not, with usage
                                                 (`serve.router.completions`)
    GET  /v1/models, /version; POST /tokenize, /detokenize   (`serve.router.tokenization`)
    GET  /health, /metrics (Prometheus), /admin/state (JSON)
    POST /admin/instances/{name}/role {"role": "pd-prefill"|"pd-decode"}   flip (drain first)
    POST /admin/rebalance                                                  one slow-loop step now

The slow loop (`serve.router.rebalance`) steps every `rebalance.period_s` when enabled.
`/admin/*` needs the admin bearer token, `/v1/*` the API key when one is set
(`serve.auth.admin`); every call to an instance is signed (`serve.auth.control`).

At most `router.max_inflight_requests` requests that call instances run at once; past that,
429 with `Retry-After` (`serve.router.overload.InflightLimit`).
Every body is read, bounded and timed by `serve.edge.guard.EdgeGuard` before a route runs (and any
error a route lets escape becomes a JSON 500 there); headers have their own deadline
(`edge_server_config`). Every error leaves as OpenAI's error JSON; the status comes from
the `ServeError` class (errors.py), mapped in `_serve_error` only. How a completion request
runs, streams, fails and is cancelled: `serve.router.completions`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from prfaas.serve import protocol as p
from prfaas.serve.auth.admin import BearerAuth, admin_token, router_guards
from prfaas.serve.auth.control import ControlSigner
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    configured_api_key,
    transfer_secret,
)
from prfaas.serve.edge.guard import EdgeGuard, edge_server_config
from prfaas.serve.errors import (
    BadRequestError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    ServeError,
    error_body,
)
from prfaas.serve.router.admission import AdmissionRejectedError
from prfaas.serve.router.completions import complete
from prfaas.serve.router.dashboard import register_dashboard
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.overload import InflightLimit, LoopWatch
from prfaas.serve.router.rebalance import admin_view
from prfaas.serve.router.registry import Registry
from prfaas.serve.router.tokenization import register_tokenization


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
                "draining": i.is_draining or i.is_reported_draining,
                "flip_to": i.flip_to.value if i.flip_to is not None else None,
                "inflight": i.inflight,
                "cluster": i.spec.cluster,
                "url": i.spec.url,
                "healthy": i.is_healthy,
                "failures_in_a_row": i.breaker.failures_in_a_row,  # its own (serve.router.breaker)
                "link_up": i.is_link_up,
                "restarts": i.restarts,
                "running": i.num_running,
                "waiting": i.num_waiting,
                "free_pages": i.free_pages,
                "cache_events_applied": i.next_seq,
                "cache_resyncs": i.resyncs,  # its events were lost to this replica (registry)
                "indexed_cache_blocks": rt.registry.indexed_blocks(i.name),
            }
            for i in rt.registry.instances.values()
        ],
        "link": {
            "up": not rt.registry.links_down(),
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
        "lease": rt.lease.admin_view(),
    }


def _health(rt: RouterRuntime) -> JSONResponse:
    """200 "ok": every instance is up; 200 "degraded": some are down, or the PrfaaS link is
    (`"link": "down"`), but a prefill and a decode instance serve; 503: requests cannot be
    served."""
    healthy = rt.registry.healthy()
    roles = {i.role for i in healthy}
    can_serve = any(r.is_prefill for r in roles) and any(not r.is_prefill for r in roles)
    link_down = bool(rt.registry.links_down())
    whole = len(healthy) == len(rt.registry.instances) and not link_down
    status = "ok" if whole else "degraded"
    body: dict[str, Any] = {"status": status if can_serve else "unavailable"}
    body["healthy"] = len(healthy)
    if link_down:
        body["link"] = "down"
    return JSONResponse(body, status_code=200 if can_serve else 503)


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
        rt.lease.fence()  # only the replica holding the lease runs it
        return {"actions": rt.slow_loop.step(rt), "threshold_tokens": rt.threshold_tokens}


def _refused(holder: dict[str, RouterRuntime], path: str, status: int) -> None:
    """A completions request refused at the edge ends `failed` too (413, 415, 408), or
    `rejected` (429: the in-flight limit, `serve.router.overload`)."""
    if path.startswith("/v1/") and "rt" in holder:
        holder["rt"].metrics.ended("rejected" if status == 429 else "failed", status)


def _lifespan(
    deployment: Deployment, holder: dict[str, RouterRuntime]
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The router's life: its runtime in `holder` (for the routes), the registry, the loop
    watch and the slow loop running while the app serves."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        signer = ControlSigner(transfer_secret(deployment), deployment)
        # Requests' calls are bounded by the in-flight limit, not by a pool they would queue
        # for; health polls have a client of their own (serve.router.registry)
        async with (
            HttpInstanceClient(signer) as client,
            HttpInstanceClient(signer, limits=httpx.Limits(max_connections=100)) as health_client,
        ):
            watch = LoopWatch()
            registry = Registry(deployment, health_client, watch)
            rt = RouterRuntime(deployment, registry, RouterMetrics(), client)
            holder["rt"] = rt
            await registry.poll_once()
            tasks = [
                asyncio.create_task(job)
                for job in (watch.run(), registry.run(), rt.slow_loop.run(rt), rt.lease.run(rt))
            ]
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                await rt.slow_loop.close()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """prfaas's errors, admission's 429 and unknown routes, as OpenAI-style JSON."""

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


def build_app(deployment: Deployment) -> FastAPI:
    holder: dict[str, RouterRuntime] = {}
    app = FastAPI(lifespan=_lifespan(deployment, holder))
    r = deployment.router
    app.add_middleware(  # innermost: counts requests whose body the edge has read
        InflightLimit,
        max_inflight=r.max_inflight_requests,
        on_refused=lambda path, status: _refused(holder, path, status),
    )
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

    _add_error_handlers(app)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(runtime(), request, is_chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(runtime(), request, is_chat=True)

    @app.get("/health")
    async def health() -> JSONResponse:
        return _health(runtime())

    @app.get("/metrics")
    async def metrics() -> Response:
        rt = runtime()
        data = rt.metrics.render(rt.registry, rt.threshold_tokens)
        return Response(data, media_type="text/plain; version=0.0.4")

    @app.get("/admin/state")
    async def admin_state() -> dict[str, Any]:
        return _admin_state(runtime())

    _admin_routes(app, runtime)
    register_tokenization(app, runtime)
    register_dashboard(app, runtime)
    return app


def serve_router(deployment: Deployment) -> None:
    """Run the router until SIGINT/SIGTERM."""
    r = deployment.router
    config = edge_server_config(
        build_app(deployment),
        host=r.host,
        port=r.port,
        header_timeout_s=r.header_timeout_s,
        keep_alive_timeout_s=r.keep_alive_timeout_s,
    )
    uvicorn.Server(config).run()
