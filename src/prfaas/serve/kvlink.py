"""Glue between the engine's layer-wise export and the transfer layer, plus link emulation.

Prefill side: each `ExportRecord` becomes one slice, `SliceKey(layer, group, start, end)`, sent
as soon as its layer is done. Decode side: the `Receiver` writes slices into an `ArraySink`;
once a request is committed its slices are read back as `ExportRecord`s for `submit_import`.

Link emulation without network namespaces: the sender's token bucket caps the rate
(`TransferConfig.rate_limit_bytes_per_s`) and `DelayedTransport` holds every write for the
link's RTT before it reaches the socket, in order (a one-way delay of a full RTT on the data
direction: ACKs come back undelayed, so a transfer's completion sees one RTT, as on a real
link). With root, `prfaas.transfer.linkemu` shapes a real kernel link instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from prfaas.transfer import ArraySink, Connection, PeerAddress, RequestId, TcpInfo, Transport
from prfaas.transfer.errors import ConnectionLostError
from prfaas.transfer.transport import Buffer, ConnectionHandler, Listener


def committed_records(sink: ArraySink, request_id: str) -> list[tuple[Any, ...]]:
    """A committed request's slices as ExportRecord fields, in (layer, group, start) order."""
    slices = sink.committed(RequestId(request_id))
    return [
        (k.layer, k.group, k.token_start, k.token_end, meta.dtype, tuple(meta.shape), data)
        for k, (meta, data) in sorted(slices.items())
    ]


class _DelayedConnection:
    """Writes reach the inner connection `delay_s` after they were made, in order."""

    def __init__(self, inner: Connection, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s
        self._queue: asyncio.Queue[tuple[float, list[bytes]]] = asyncio.Queue()
        self._error: BaseException | None = None
        self._pump = asyncio.get_running_loop().create_task(self._run())

    @property
    def peer_name(self) -> str:
        return self._inner.peer_name

    async def write(self, parts: Sequence[Buffer]) -> None:
        if self._error is not None:
            raise ConnectionLostError(f"{self.peer_name}: {self._error}")
        due = asyncio.get_running_loop().time() + self._delay_s
        self._queue.put_nowait((due, [bytes(p) for p in parts]))

    async def read_into(self, view: memoryview) -> None:
        await self._inner.read_into(view)

    def tcp_info(self) -> TcpInfo | None:
        return self._inner.tcp_info()

    def close(self) -> None:
        self._pump.cancel()
        self._inner.close()

    def abort(self) -> None:
        self._pump.cancel()
        self._inner.abort()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, parts = await self._queue.get()
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            try:
                await self._inner.write(parts)
            except Exception as err:  # the reader side reports the loss
                self._error = err
                with contextlib.suppress(Exception):
                    self._inner.abort()
                return


class DelayedTransport:
    """A `Transport` whose outgoing connections add `delay_s` to every write."""

    def __init__(self, inner: Transport, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s

    async def connect(self, address: PeerAddress) -> Connection:
        conn = await self._inner.connect(address)
        if self._delay_s <= 0:
            return conn
        return _DelayedConnection(conn, self._delay_s)

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        return await self._inner.listen(address, handler)
