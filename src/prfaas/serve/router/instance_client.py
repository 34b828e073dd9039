"""The router's one client of the instances' control API: one method per endpoint, typed.

Every call the router makes to an instance goes through an `InstanceClient` (the request flow,
tokenizer fallbacks, registry polls and probes, role flips and drains, the slow-loop lease,
cancels), so the contract of `serve.protocol` is written once. Two implementations obey it:
`HttpInstanceClient` (httpx, signed calls) and the in-process fake the unit tests drive
(`tests/serve/fake_instances.py`); `tests/serve/test_instance_client.py` runs one contract test
against both.

Errors (one tree for this boundary; low-level httpx errors are translated here only):

    InstanceCallError
    ├ CallBroke     no answer: refused, reset, timed out (`is_timeout`), or no pooled
    │               connection came free in time (`is_pool_wait`: the router's own limit)
    └ CallRefused   the instance answered another status than 200 (`status_code`, `body`)

A body that is not the protocol's shape raises pydantic's `ValidationError` (a ValueError).

Connections: `HttpInstanceClient` holds one httpx pool per instance (keyed by base URL),
built on first use. One pool for every instance made each call walk every pooled connection
of every instance (httpcore checks each one per request: 28% of the router's CPU under load,
docs/benchmarks.md); a pool per instance walks only that instance's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

import httpx
from pydantic import BaseModel

from prfaas.serve import protocol as p

_Result = TypeVar("_Result", bound=BaseModel)
JSON = {"content-type": "application/json"}
CALL_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 2.0
UNBOUNDED = httpx.Limits(max_connections=None)  # requests are bounded by the in-flight limit


class InstanceCallError(Exception):
    """A call to an instance did not give the answer asked for."""


class CallBroke(InstanceCallError):
    """No answer came (transport failure)."""

    def __init__(self, message: str, *, is_timeout: bool = False, is_pool_wait: bool = False):
        super().__init__(message)
        self.is_timeout = is_timeout
        self.is_pool_wait = is_pool_wait


class CallRefused(InstanceCallError):
    """The instance answered `status_code` with `body` (OpenAI-style error JSON, usually)."""

    def __init__(self, status_code: int, body: bytes):
        super().__init__(f"HTTP {status_code}: {body[:200].decode(errors='replace')}")
        self.status_code = status_code
        self.body = body

    @property
    def message(self) -> str:
        """The instance's error text from its OpenAI-style error JSON (or the raw body)."""
        try:
            return str(json.loads(self.body)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            return self.body.decode(errors="replace")[:200]


class InstanceClient(Protocol):
    """The instance endpoints of `serve.protocol`, one method each; `url` is the base URL."""

    async def info(self, url: str) -> p.InstanceInfo: ...

    async def state(
        self, url: str, since: int, *, timeout_s: float, fresh_connection: bool = False
    ) -> p.InstanceState:
        """`GET /state?since=N`; `fresh_connection`: a health probe that must not reuse a
        possibly stale pooled connection."""
        ...

    async def tokenize(self, url: str, body: p.TokenizeRequest) -> p.TokenizeResult: ...

    async def detokenize(self, url: str, body: p.TokenizeResult) -> p.DetokenizeResult: ...

    async def prefill(
        self, url: str, body: p.PrefillRequest, *, timeout_s: float
    ) -> p.PrefillResult: ...

    def decode(
        self, url: str, body: p.DecodeCall, *, timeout_s: float
    ) -> AbstractAsyncContextManager[AsyncIterator[bytes]]:
        """The decode stream's raw bytes (JSON lines: `serve.json_lines`); CallRefused on
        entering when the instance answers another status than 200."""
        ...

    async def cancel(
        self, url: str, body: p.CancelRequest, *, timeout_s: float
    ) -> p.CancelResult: ...

    async def role(self, url: str, body: p.RoleRequest) -> p.InstanceInfo: ...

    async def lease(self, url: str, body: p.LeaseRequest, *, timeout_s: float) -> p.LeaseAnswer: ...

    async def lease_release(
        self, url: str, body: p.LeaseRequest, *, timeout_s: float
    ) -> p.LeaseAnswer: ...

    async def drain(self, url: str, body: p.DrainRequest) -> p.LeaseAnswer: ...

    async def cached(self, url: str, body: p.TokenizeResult) -> p.CachedResult: ...

    async def prefix_send(
        self, url: str, body: p.PrefixSendRequest, *, timeout_s: float
    ) -> p.PrefixSendResult: ...

    async def prefix_import(
        self, url: str, body: p.PrefixImportRequest, *, timeout_s: float
    ) -> p.PrefixImportResult: ...

    async def aclose(self) -> None: ...


def _broke(err: httpx.TransportError) -> CallBroke:
    return CallBroke(
        repr(err),
        is_timeout=isinstance(err, httpx.TimeoutException),
        is_pool_wait=isinstance(err, httpx.PoolTimeout),
    )


class HttpInstanceClient:
    """`InstanceClient` over HTTP: every call signed by `auth` (`serve.auth.control`), one
    connection pool per instance. `transport` replaces the network (tests: a mock)."""

    def __init__(
        self,
        auth: httpx.Auth | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        limits: httpx.Limits = UNBOUNDED,
    ) -> None:
        self._auth = auth
        self._transport = transport
        self._limits = limits
        self._pools: dict[str, httpx.AsyncClient] = {}

    def _pool(self, url: str) -> httpx.AsyncClient:
        pool = self._pools.get(url)
        if pool is None:
            pool = httpx.AsyncClient(
                base_url=url,
                auth=self._auth,
                transport=self._transport,
                limits=self._limits,
                timeout=CALL_TIMEOUT_S,
            )
            self._pools[url] = pool
        return pool

    async def _post(
        self, url: str, path: str, body: BaseModel, kind: type[_Result], timeout_s: float
    ) -> _Result:
        try:
            response = await self._pool(url).post(
                path, content=body.model_dump_json(), headers=JSON, timeout=timeout_s
            )
        except httpx.TransportError as err:
            raise _broke(err) from None
        if response.status_code != 200:
            raise CallRefused(response.status_code, response.content)
        return kind.model_validate_json(response.content)

    async def _get(
        self, url: str, path: str, kind: type[_Result], timeout_s: float, *, close: bool = False
    ) -> _Result:
        headers = {"connection": "close"} if close else None
        try:
            response = await self._pool(url).get(path, timeout=timeout_s, headers=headers)
        except httpx.TransportError as err:
            raise _broke(err) from None
        if response.status_code != 200:
            raise CallRefused(response.status_code, response.content)
        return kind.model_validate_json(response.content)

    async def info(self, url: str) -> p.InstanceInfo:
        return await self._get(url, "/info", p.InstanceInfo, CONNECT_TIMEOUT_S)

    async def state(
        self, url: str, since: int, *, timeout_s: float, fresh_connection: bool = False
    ) -> p.InstanceState:
        path = f"/state?since={since}"
        return await self._get(url, path, p.InstanceState, timeout_s, close=fresh_connection)

    async def tokenize(self, url: str, body: p.TokenizeRequest) -> p.TokenizeResult:
        return await self._post(url, "/tokenize", body, p.TokenizeResult, CALL_TIMEOUT_S)

    async def detokenize(self, url: str, body: p.TokenizeResult) -> p.DetokenizeResult:
        return await self._post(url, "/detokenize", body, p.DetokenizeResult, CALL_TIMEOUT_S)

    async def prefill(
        self, url: str, body: p.PrefillRequest, *, timeout_s: float
    ) -> p.PrefillResult:
        return await self._post(url, "/prefill", body, p.PrefillResult, timeout_s)

    @contextlib.asynccontextmanager
    async def decode(
        self, url: str, body: p.DecodeCall, *, timeout_s: float
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        content = body.model_dump_json()
        try:
            async with self._pool(url).stream(
                "POST", "/decode", content=content, headers=JSON, timeout=timeout
            ) as response:
                if response.status_code != 200:
                    raise CallRefused(response.status_code, await response.aread())
                yield response.aiter_bytes()
        except httpx.TransportError as err:
            raise _broke(err) from None

    async def cancel(self, url: str, body: p.CancelRequest, *, timeout_s: float) -> p.CancelResult:
        return await self._post(url, "/cancel", body, p.CancelResult, timeout_s)

    async def role(self, url: str, body: p.RoleRequest) -> p.InstanceInfo:
        return await self._post(url, "/role", body, p.InstanceInfo, CALL_TIMEOUT_S)

    async def lease(self, url: str, body: p.LeaseRequest, *, timeout_s: float) -> p.LeaseAnswer:
        return await self._post(url, "/lease", body, p.LeaseAnswer, timeout_s)

    async def lease_release(
        self, url: str, body: p.LeaseRequest, *, timeout_s: float
    ) -> p.LeaseAnswer:
        return await self._post(url, "/lease/release", body, p.LeaseAnswer, timeout_s)

    async def drain(self, url: str, body: p.DrainRequest) -> p.LeaseAnswer:
        return await self._post(url, "/drain", body, p.LeaseAnswer, CALL_TIMEOUT_S)

    async def cached(self, url: str, body: p.TokenizeResult) -> p.CachedResult:
        return await self._post(url, "/cached", body, p.CachedResult, CALL_TIMEOUT_S)

    async def prefix_send(
        self, url: str, body: p.PrefixSendRequest, *, timeout_s: float
    ) -> p.PrefixSendResult:
        return await self._post(url, "/prefix/send", body, p.PrefixSendResult, timeout_s)

    async def prefix_import(
        self, url: str, body: p.PrefixImportRequest, *, timeout_s: float
    ) -> p.PrefixImportResult:
        return await self._post(url, "/prefix/import", body, p.PrefixImportResult, timeout_s)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()

    async def __aenter__(self) -> HttpInstanceClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
