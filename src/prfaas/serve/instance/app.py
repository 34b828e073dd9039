"""The instance's HTTP control API: the routes of `serve.instance.runtime` over its runtime.

`serve_instance` builds the runtime (`serve.instance.runtime.build_runtime`: the backend and its
shipping plan), the FastAPI app around it (every call signed for this instance and within
the router's limits: `serve.edge.guard`, `serve.auth.control`), and serves it with uvicorn until
SIGINT/SIGTERM; the app's lifespan is the runtime's (`serve.instance.runtime.running`). Errors map
to the OpenAI-style JSON of `serve.errors`; a transfer failure is 503 when the decode side
lacked room, 502 otherwise.

One call is unsigned: `GET /health` answers 200 `{"status": "ok"}` once the instance serves
(it listens only after its model is loaded and its runtime started), for the kubelet's probes
and load balancers, which cannot sign. It says nothing else and reads no body.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from prfaas.serve import protocol as p
from prfaas.serve.auth.control import ControlGate
from prfaas.serve.backends.interface import cached_prefix
from prfaas.serve.config.deployment import Deployment
from prfaas.serve.edge.guard import EdgeGuard, edge_server_config
from prfaas.serve.errors import (
    BadRequestError,
    InstanceFailedError,
    KvBufferFullError,
    ServeError,
)
from prfaas.serve.instance.runtime import (
    InstanceRuntime,
    build_runtime,
    cancel_request,
    check_vocabulary,
    import_prefix,
    run_prefill,
    running,
    send_prefix,
    stream_decode,
    switch_role,
)
from prfaas.serve.instance.state import state_body
from prfaas.transfer import TransferError
from prfaas.transfer.errors import AbortReason, TransferAbortedError


def _error(err: ServeError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status_code)


def _transfer_failure(err: TransferError) -> ServeError:
    """A full receive buffer on the decode side is room lacking now (503), not a failure."""
    if isinstance(err, TransferAbortedError) and err.reason is AbortReason.OUT_OF_SPACE:
        return KvBufferFullError(f"the decode side had no room for the KV: {err}")
    return InstanceFailedError(f"KV transfer failed: {err}")


HEALTH_PATH = "/health"
_HEALTHY = b'{"status":"ok"}'


class _UnsignedHealth:
    """Answers `GET /health` before the signature check (outermost middleware): a probe
    that cannot sign still learns that the instance serves; every other call is signed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != HEALTH_PATH or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        length = str(len(_HEALTHY)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", length)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": _HEALTHY})


def build_app(rt: InstanceRuntime) -> FastAPI:
    """The control API of instance `rt` (the routes in `serve.instance.runtime`'s docstring)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with running(rt):
            yield

    app = FastAPI(lifespan=lifespan)
    edge = rt.deployment.instance_edge  # the router's limits; only calls signed for us
    gate = ControlGate(rt.transfer_config.secret, rt.spec.name)
    app.add_middleware(
        EdgeGuard, max_body_bytes=edge.max_body_bytes, body_timeout_s=edge.body_timeout_s, gate=gate
    )
    app.add_middleware(_UnsignedHealth)  # added last: outermost, before the signature check

    @app.exception_handler(ServeError)
    async def _serve_error(_: Request, err: ServeError) -> JSONResponse:
        return _error(err)

    @app.exception_handler(TransferError)
    async def _transfer_error(_: Request, err: TransferError) -> JSONResponse:
        return _error(_transfer_failure(err))

    _add_engine_routes(app, rt)
    _add_request_routes(app, rt)
    return app


def _add_engine_routes(app: FastAPI, rt: InstanceRuntime) -> None:
    """What the router asks of the instance itself: facts, state, the tokenizer."""

    @app.get("/info")
    async def info() -> p.InstanceInfo:
        return rt.info

    @app.get("/state", response_class=Response)
    async def state(since: int = 0) -> Response:
        """`protocol.InstanceState`, serialized once (`state.state_body`)."""
        return Response(state_body(rt, since), media_type="application/json")

    # The tokenizer verbs run in a worker thread: a backend's may block (vLLM's asks its
    # child over HTTP; a long prompt takes a real tokenizer tens of milliseconds), and the
    # event loop serves /state, prefills and decode streams meanwhile.
    @app.post("/tokenize")
    async def tokenize(body: p.TokenizeRequest) -> p.TokenizeResult:
        if body.chat is None:
            encode = functools.partial(
                rt.backend.encode, body.text, add_special_tokens=body.add_special_tokens
            )
            ids = await asyncio.to_thread(encode)
        else:
            ids = await asyncio.to_thread(rt.backend.encode_chat, body.chat)
        return p.TokenizeResult(token_ids=ids)

    @app.post("/detokenize")
    async def detokenize(body: p.TokenizeResult) -> p.DetokenizeResult:
        check_vocabulary(rt, body.token_ids)
        text = await asyncio.to_thread(rt.backend.detokenize, body.token_ids)
        return p.DetokenizeResult(text=text)


def _add_request_routes(app: FastAPI, rt: InstanceRuntime) -> None:
    """The verbs of one request: prefill, decode, cancel, and the cache's."""

    @app.post("/prefill")
    async def prefill(body: p.PrefillRequest) -> p.PrefillResult:
        return await run_prefill(rt, body)

    @app.post("/decode")
    async def decode(body: p.DecodeCall) -> StreamingResponse:
        if rt.spec.role.is_prefill:
            raise BadRequestError(f"instance {rt.spec.name} is not a decode instance")
        if body.token_ids is not None:
            check_vocabulary(rt, body.token_ids)
        elif not rt.backend.info.capabilities.prompt_in_kv_stream:
            raise BadRequestError(
                f"instance {rt.spec.name} takes its prompt in /decode: its backend does not "
                "declare prompt_in_kv_stream",
                param="token_ids",
            )
        return StreamingResponse(stream_decode(rt, body), media_type="application/x-ndjson")

    @app.post("/cancel")
    async def cancel(body: p.CancelRequest) -> p.CancelResult:
        return cancel_request(rt, body.request_id)

    @app.post("/role")
    async def role(body: p.RoleRequest) -> p.InstanceInfo:
        return switch_role(rt, body)

    @app.post("/lease")
    async def lease(body: p.LeaseRequest) -> p.LeaseAnswer:
        """The slow-loop lease (`serve.instance.lease`): granted or refused, never an error."""
        return rt.lease.request(body)

    @app.post("/drain")
    async def drain(body: p.DrainRequest) -> p.LeaseAnswer:
        """Drained for a flip: every router replica sees `draining` in /state (fenced)."""
        return rt.lease.drain(body)

    @app.post("/lease/release")
    async def lease_release(body: p.LeaseRequest) -> p.LeaseAnswer:
        return rt.lease.release(body)

    @app.post("/cached")
    async def cached(body: p.TokenizeResult) -> p.CachedResult:
        """Prompt tokens whose attention KV this pool holds (400 `unsupported_by_backend` for
        a backend that cannot say: its `/info` capabilities do not `reports_cached_prefix`)."""
        holder = cached_prefix(rt.backend)
        loop = asyncio.get_running_loop()
        return p.CachedResult(tokens=await holder.cached_prefix_tokens(loop, body.token_ids))

    @app.post("/prefix/send")
    async def prefix_send(body: p.PrefixSendRequest) -> p.PrefixSendResult:
        return await send_prefix(rt, body)

    @app.post("/prefix/import")
    async def prefix_import(body: p.PrefixImportRequest) -> p.PrefixImportResult:
        return await import_prefix(rt, body)


def serve_instance(deployment: Deployment, name: str) -> None:
    """Run one instance until SIGINT/SIGTERM."""
    rt = build_runtime(deployment, name)
    edge = deployment.instance_edge
    config = edge_server_config(
        build_app(rt),
        host=rt.spec.host,
        port=rt.spec.http_port,
        header_timeout_s=edge.header_timeout_s,
        keep_alive_timeout_s=edge.keep_alive_timeout_s,
    )
    try:
        uvicorn.Server(config).run()
    except SystemExit:  # uvicorn's exit on a failed start-up, after logging the traceback
        if rt.startup_error is not None:
            raise rt.startup_error from None  # the CLI's one line and status 2
        raise
