"""The `Transport` protocol and its TCP implementation (the in-memory one is in `memory`).

A transport moves bytes; it knows nothing of frames. The sender and receiver are written against
`Transport` / `Connection` only, so the same contract tests run over TCP and in memory.

Plain TCP (`transfer.socket_stream.SocketStream`) drives a blocking socket from two threads per
connection, one per direction, so the event loop wakes once per frame, and reads payloads
straight into the destination pages. TLS (`_TcpStream`) is an
`asyncio.BufferedProtocol` that also reads payloads straight into the caller's pages.
Implementations raise only OSError subclasses and `asyncio.IncompleteReadError`; `framing`
translates those into the package's exception tree.

Lifecycle: `connect` / `listen` -> `read_into` / `readv_into` / `write` -> `close` (orderly) or
`abort` (reset).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from prfaas.transfer.config import TlsConfig
from prfaas.transfer.socket_stream import NOTSENT_LOWAT_BYTES, STAGING_BYTES, SocketStream
from prfaas.transfer.telemetry import TcpInfo, read_tcp_info

Buffer = bytes | bytearray | memoryview
SocketFactory = Callable[[], socket.socket]
# Runs just before a write's bytes go out, on the thread that sends them: where the framing
# layer computes a payload check, off the event loop, right before the copy reads the same bytes.
BeforeSend = Callable[[], None]
WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True, order=True)
class PeerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Digest(Protocol):
    """A running hash (`xxhash.xxh3_64()`): what `read_into` feeds the bytes it reads."""

    def update(self, data: Buffer, /) -> None: ...


class Connection(Protocol):
    """One full-duplex byte stream."""

    @property
    def peer_name(self) -> str: ...

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        """Queue `parts` in order and wait until the stream accepts more (flow control).
        `before_send` runs first, on the sending thread; it may fill bytes of `parts` in place."""
        ...

    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        """Fill `view` exactly; IncompleteReadError on end of stream. With `digest`, every byte
        is also fed to it, in order, on the thread that read it (while it is in cache)."""
        ...

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        """`read_into` over consecutive `views` (a scatter read: one system call where the
        transport can, so a payload spread over many pages costs one wake-up)."""
        ...

    def tcp_info(self) -> TcpInfo | None:
        """Kernel TCP statistics, or None where the stream is not a TCP socket."""
        ...

    def close(self) -> None: ...

    def abort(self) -> None:
        """Drop the stream at once (a reset): how tests cut a connection mid-transfer."""
        ...


ConnectionHandler = Callable[[Connection], Coroutine[Any, Any, None]]


class Listener(Protocol):
    @property
    def address(self) -> PeerAddress: ...

    async def close(self) -> None: ...


class Transport(Protocol):
    async def connect(self, address: PeerAddress) -> Connection: ...

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener: ...


class _TcpStream(asyncio.BufferedProtocol):
    """A TCP (or TLS) stream with zero-copy reads into caller-supplied buffers."""

    def __init__(self, on_made: Callable[[_TcpStream], None] | None = None) -> None:
        self._on_made = on_made
        self._transport: asyncio.Transport | None = None
        self._staging = memoryview(bytearray(STAGING_BYTES))
        self._lo = self._hi = 0
        self._target: memoryview | None = None
        self._filled = 0
        self._into_target = False
        self._read_waiter: asyncio.Future[None] | None = None
        self._lost: BaseException | None = None
        self._is_paused_reading = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._is_paused_writing = False
        self.peer_name = "?"

    # -- asyncio callbacks ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; not always a subclass of `asyncio.Transport` (uvloop's TLS one).
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        peer = transport.get_extra_info("peername")
        self.peer_name = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self._on_made is not None:
            self._on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        # Never hand out an empty view: TLS reads treat a 0-byte read as the peer's close.
        target = self._target
        if target is not None and self._filled < len(target) and self._lo == self._hi:
            self._into_target = True
            return target[self._filled :]
        self._into_target = False
        if self._hi == len(self._staging) and self._lo > 0:
            size = self._hi - self._lo
            self._staging[:size] = self._staging[self._lo : self._hi]
            self._lo, self._hi = 0, size
        return self._staging[self._hi :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_target:
            self._filled += nbytes
        else:
            self._hi += nbytes
            self._take_staged()
            if self._hi == len(self._staging) and self._lo == 0 and self._transport:
                self._transport.pause_reading()
                self._is_paused_reading = True
        if self._target is not None and self._filled == len(self._target):
            self._wake_reader(None)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc if exc is not None else EOFError()
        self._wake_reader(self._lost)
        self._wake_writer(self._lost)

    def pause_writing(self) -> None:
        self._is_paused_writing = True

    def resume_writing(self) -> None:
        self._is_paused_writing = False
        self._wake_writer(None)

    # -- stream API -------------------------------------------------------------------------
    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        await self._fill(view)
        if digest is not None:
            digest.update(view)

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        for view in views:
            await self.read_into(view, digest)

    async def _fill(self, view: memoryview) -> None:
        self._target, self._filled = view, 0
        try:
            self._take_staged()
            if self._is_paused_reading and self._transport is not None:
                self._is_paused_reading = False
                self._transport.resume_reading()
            if self._filled < len(view):
                if self._lost is not None:
                    raise self._read_error()
                self._read_waiter = asyncio.get_running_loop().create_future()
                await self._read_waiter
        finally:
            self._target, self._read_waiter = None, None

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        if self._lost is not None or self._transport is None:
            raise ConnectionResetError("connection is closed")
        if before_send is not None:
            before_send()
        for part in parts:
            self._transport.write(part)
        if self._is_paused_writing:
            self._drain_waiter = asyncio.get_running_loop().create_future()
            await self._drain_waiter

    def tcp_info(self) -> TcpInfo | None:
        sock = self._transport.get_extra_info("socket") if self._transport else None
        return read_tcp_info(sock) if sock is not None else None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # -- helpers ----------------------------------------------------------------------------
    def _take_staged(self) -> None:
        if self._target is None or self._lo == self._hi:
            return
        size = min(self._hi - self._lo, len(self._target) - self._filled)
        self._target[self._filled : self._filled + size] = self._staging[self._lo : self._lo + size]
        self._filled += size
        self._lo += size
        if self._lo == self._hi:
            self._lo = self._hi = 0

    def _read_error(self) -> BaseException:
        if isinstance(self._lost, EOFError):
            assert self._target is not None
            return asyncio.IncompleteReadError(
                bytes(self._target[: self._filled]), len(self._target)
            )
        assert self._lost is not None
        return ConnectionResetError(str(self._lost))

    def _wake_reader(self, exc: BaseException | None) -> None:
        waiter = self._read_waiter
        if waiter is None or waiter.done():
            return
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(self._read_error())

    def _wake_writer(self, exc: BaseException | None) -> None:
        waiter, self._drain_waiter = self._drain_waiter, None
        if waiter is None or waiter.done():
            return
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(ConnectionResetError(str(exc)))


class _SocketListener:
    def __init__(
        self, sock: socket.socket, handler: ConnectionHandler, notsent_lowat_bytes: int | None
    ) -> None:
        self._sock = sock
        self._handler = handler
        self._notsent_lowat_bytes = notsent_lowat_bytes
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        host, port = sock.getsockname()[:2]
        self._address = PeerAddress(host, port)
        self._accepting = self._loop.create_task(self._accept())

    @property
    def address(self) -> PeerAddress:
        return self._address

    async def _accept(self) -> None:
        while True:
            try:
                conn, _ = await self._loop.sock_accept(self._sock)
            except ConnectionError:
                continue  # the peer gave up before we got to it
            try:
                stream = SocketStream(conn, self._loop, self._notsent_lowat_bytes)
            except OSError:  # reset between accept and setup (no peer name any more)
                conn.close()
                continue
            task = self._loop.create_task(self._serve(stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: SocketStream) -> None:
        try:
            await self._handler(stream)
        finally:
            stream.close()

    async def close(self) -> None:
        self._accepting.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(self._accepting, *self._tasks, return_exceptions=True)
        self._sock.close()


class _TcpListener:
    def __init__(self, server: asyncio.Server, tasks: set[asyncio.Task[None]]) -> None:
        self._server = server
        self._tasks = tasks
        host, port = server.sockets[0].getsockname()[:2]
        self._address = PeerAddress(host, port)

    @property
    def address(self) -> PeerAddress:
        return self._address

    async def close(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class TcpTransport:
    """TCP, optionally TLS. `socket_factory` creates the sockets (for instance inside a network
    namespace, see `linkemu`); by default they are plain sockets of the address's family.
    `notsent_lowat_bytes` bounds each plain-TCP socket's unsent backlog (None: the kernel's
    default, no bound; see NOTSENT_LOWAT_BYTES)."""

    def __init__(
        self,
        tls: TlsConfig | None = None,
        socket_factory: SocketFactory | None = None,
        notsent_lowat_bytes: int | None = NOTSENT_LOWAT_BYTES,
    ) -> None:
        self._tls = tls
        self._socket_factory = socket_factory
        self._notsent_lowat_bytes = notsent_lowat_bytes

    async def connect(self, address: PeerAddress) -> Connection:
        loop = asyncio.get_running_loop()
        sock = await self._connected_socket(address)
        if self._tls is None:
            try:
                return SocketStream(sock, loop, self._notsent_lowat_bytes)
            except OSError:
                sock.close()
                raise
        _, stream = await loop.create_connection(
            _TcpStream,
            sock=sock,
            ssl=self._tls.client_context(),
            server_hostname=self._tls.server_hostname,
        )
        return stream

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        sock = self._listening_socket(address)
        if self._tls is None:
            return _SocketListener(sock, handler, self._notsent_lowat_bytes)
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()

        def serve(stream: _TcpStream) -> None:
            # Called once TCP and TLS are up: a failed TLS handshake never reaches the handler.
            task = loop.create_task(handler(stream))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        def make_stream() -> _TcpStream:
            return _TcpStream(serve)

        ssl_context = self._tls.server_context()
        server = await loop.create_server(make_stream, sock=sock, ssl=ssl_context)
        return _TcpListener(server, tasks)

    async def _connected_socket(self, address: PeerAddress) -> socket.socket:
        loop = asyncio.get_running_loop()
        if self._socket_factory is not None:
            sock = self._socket_factory()
            target: tuple[Any, ...] = (address.host, address.port)
        else:
            infos = await loop.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
            family, kind, proto, _, target = infos[0]
            sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, target)
        except BaseException:
            sock.close()
            raise
        return sock

    def _listening_socket(self, address: PeerAddress) -> socket.socket:
        if self._socket_factory is None:
            sock = socket.create_server((address.host, address.port), backlog=128)
        else:
            sock = self._socket_factory()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address.host, address.port))
            sock.listen(128)
        sock.setblocking(False)
        return sock
