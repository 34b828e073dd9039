"""In-memory `Transport`: the test double of the transport trio.

Each direction of a connection is a bounded FIFO of byte chunks, so backpressure, partial reads
and chunk boundaries behave like a socket's, deterministically and without the kernel. Chunk
boundaries are kept exactly as written, which is what the framing property tests rely on to
cut frames at arbitrary places. Addresses are names local to one `MemoryTransport` instance.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence

from prfaas.transfer.telemetry import TcpInfo
from prfaas.transfer.transport import (
    BeforeSend,
    Buffer,
    Connection,
    ConnectionHandler,
    Digest,
    Listener,
    PeerAddress,
)

DEFAULT_PIPE_BYTES = 1024 * 1024


class _Pipe:
    """One direction of a connection: bounded, ordered, closable, resettable."""

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity_bytes = capacity_bytes
        self._chunks: deque[memoryview] = deque()
        self._size_bytes = 0
        self._is_closed = False
        self._is_reset = False
        self._waiters: list[asyncio.Future[None]] = []

    async def write(self, data: Buffer) -> None:
        while self._size_bytes >= self._capacity_bytes and not self._is_done():
            await self._wait()
        if self._is_done():
            raise ConnectionResetError("memory connection is closed")
        chunk = memoryview(bytes(data))
        self._chunks.append(chunk)
        self._size_bytes += len(chunk)
        self._wake()

    async def read_into(self, view: memoryview) -> None:
        filled = 0
        while filled < len(view):
            while not self._chunks and not self._is_done():
                await self._wait()
            if self._is_reset:
                raise ConnectionResetError("memory connection was reset")
            if not self._chunks:
                raise asyncio.IncompleteReadError(bytes(view[:filled]), len(view))
            filled += self._take(view[filled:])
            self._wake()

    def _take(self, view: memoryview) -> int:
        chunk = self._chunks[0]
        size = min(len(chunk), len(view))
        view[:size] = chunk[:size]
        if size == len(chunk):
            self._chunks.popleft()
        else:
            self._chunks[0] = chunk[size:]
        self._size_bytes -= size
        return size

    def _is_done(self) -> bool:
        return self._is_closed or self._is_reset

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self._is_closed = True
        self._wake()

    def reset(self) -> None:
        self._is_reset = True
        self._chunks.clear()
        self._size_bytes = 0
        self._wake()


class MemoryConnection:
    def __init__(self, peer_name: str, inbound: _Pipe, outbound: _Pipe) -> None:
        self._peer_name = peer_name
        self._inbound = inbound
        self._outbound = outbound

    @property
    def peer_name(self) -> str:
        return self._peer_name

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        if before_send is not None:
            before_send()
        for part in parts:
            await self._outbound.write(part)

    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        await self._inbound.read_into(view)
        if digest is not None:
            digest.update(view)

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        for view in views:
            await self.read_into(view, digest)

    def tcp_info(self) -> TcpInfo | None:
        return None

    def close(self) -> None:
        self._outbound.close()
        self._inbound.reset()

    def abort(self) -> None:
        self._outbound.reset()
        self._inbound.reset()


class _MemoryListener:
    def __init__(self, transport: MemoryTransport, address: PeerAddress) -> None:
        self._transport = transport
        self._address = address

    @property
    def address(self) -> PeerAddress:
        return self._address

    async def close(self) -> None:
        self._transport.unlisten(self._address)


class MemoryTransport:
    """Connections between endpoints of this one instance (no global registry)."""

    def __init__(self, pipe_bytes: int = DEFAULT_PIPE_BYTES) -> None:
        self._pipe_bytes = pipe_bytes
        self._handlers: dict[PeerAddress, ConnectionHandler] = {}
        self._ports = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    async def connect(self, address: PeerAddress) -> Connection:
        handler = self._handlers.get(address)
        if handler is None:
            raise ConnectionRefusedError(f"nothing listens on {address}")
        up, down = _Pipe(self._pipe_bytes), _Pipe(self._pipe_bytes)
        client_name = f"memory-client-{next(self._ports)}"
        task = asyncio.get_running_loop().create_task(
            handler(MemoryConnection(client_name, inbound=up, outbound=down))
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return MemoryConnection(str(address), inbound=down, outbound=up)

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        if address.port == 0:
            address = PeerAddress(address.host, next(self._ports))
        if address in self._handlers:
            raise OSError(f"address {address} is in use")
        self._handlers[address] = handler
        return _MemoryListener(self, address)

    def unlisten(self, address: PeerAddress) -> None:
        self._handlers.pop(address, None)
