"""The `Transport` protocol and its TCP implementation (the in-memory one is in `memory`).

A transport moves bytes; it knows nothing of frames. The sender and receiver are written against
`Transport` / `Connection` only, so the same contract tests run over TCP and in memory.

Plain TCP (`_SocketStream`) drives a blocking socket from two threads per connection, one per
direction, so the event loop wakes once per frame rather than once per socket-buffer's worth:
a write is one `sendmsg` of the header and the payload from their own buffers (no
concatenation, no copy into a transport buffer), and a large read is one scatter
`recvmsg_into(..., MSG_WAITALL)` straight into the destination pages; both release the GIL. Small
reads (frame headers, ACKs) go through a staging buffer, from the event loop without blocking,
waiting for readiness in the loop's own selector: no thread hand-off (two context switches)
per frame header. Writes, even small ones, stay on the writer thread: a send must take the
socket's lock, which the reader thread holds while it copies a payload, and the event loop
must not wait for that. TLS (`_TcpStream`) is an
`asyncio.BufferedProtocol` that also reads payloads straight into the caller's pages.
Implementations raise only OSError subclasses and `asyncio.IncompleteReadError`; `framing`
translates those into the package's exception tree.

Lifecycle: `connect` / `listen` -> `read_into` / `readv_into` / `write` -> `close` (orderly) or
`abort` (reset).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import socket
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from prfaas.transfer.config import TlsConfig
from prfaas.transfer.telemetry import TcpInfo, read_tcp_info

Buffer = bytes | bytearray | memoryview
SocketFactory = Callable[[], socket.socket]
# Runs just before a write's bytes go out, on the thread that sends them: where the framing
# layer computes a payload check, off the event loop, right before the copy reads the same bytes.
BeforeSend = Callable[[], None]
STAGING_BYTES = 256 * 1024
WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
# Reads at least this large go to the connection's reader thread; smaller ones are done on the
# event loop with non-blocking calls.
DIRECT_READ_BYTES = 64 * 1024
# A small read on the event loop takes at most this much beyond what was asked for: enough for
# a frame header and a few ACKs behind it, too little to pull a payload's head through the
# staging buffer (a copy the event loop would make while holding the GIL).
READ_AHEAD_BYTES = 8 * 1024
MAX_QUEUED_WRITES = 1
ABORT_READ_WAIT_S = 1.0
# TCP_NOTSENT_LOWAT: a connection's socket holds at most this much not-yet-sent data beyond
# its congestion window; a write blocks until it has drained below it. Frames then wait in
# the link's shared queue, not in one connection's socket buffer, so connections take frames
# at the pace each really sends: none is left with a long private backlog to drain alone,
# more slowly, at the end of a transfer (measured on a 5 Gbit/s 20 ms link, 4 connections).
NOTSENT_LOWAT_BYTES = 1024 * 1024


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
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
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


@dataclass(frozen=True, slots=True)
class _Stop:
    """Sentinel for an `_IoThread`: run `final` (if any), then exit."""

    final: Callable[[], None] | None = None


_Job = tuple[Callable[[], int], "asyncio.Future[int]"]


class _IoThread:
    """A daemon thread running one direction's blocking socket calls, in submission order.

    Its own thread, not an executor's: a call blocked on a silent peer must neither hold up
    another connection's calls nor interpreter exit."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, name: str, on_exit: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._on_exit = on_exit
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, call: Callable[[], int]) -> asyncio.Future[int]:
        future: asyncio.Future[int] = self._loop.create_future()
        self._jobs.put((call, future))
        return future

    def stop(self, final: Callable[[], None] | None = None) -> None:
        self._jobs.put(_Stop(final))

    def _run(self) -> None:
        try:
            while not isinstance(job := self._jobs.get(), _Stop):
                call, future = job
                try:
                    outcome: int | Exception = call()
                except Exception as exc:  # handed over to the awaiting coroutine
                    outcome = exc
                with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting
                    self._loop.call_soon_threadsafe(_settle, future, outcome)
            if job.final is not None:
                job.final()
        finally:
            self._on_exit()


def _retrieve(future: asyncio.Future[int]) -> None:
    """A queued write's error also fails the next write or read; never log it as unretrieved."""
    if not future.cancelled():
        future.exception()


def _settle(future: asyncio.Future[int], outcome: int | Exception) -> None:
    if future.done():  # the awaiting coroutine was cancelled
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class _SocketStream:
    """Plain TCP over a blocking socket driven by a reader and a writer thread (module doc).

    Page safety: `abort()` returns only once no `recv` can still be writing into a caller's
    buffer, so a receiver may free (and reuse) the destination pages right after it."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        notsent_lowat_bytes: int | None = NOTSENT_LOWAT_BYTES,
    ) -> None:
        sock.setblocking(True)
        # Small frames (ACKs, END) must not wait for Nagle's algorithm.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if notsent_lowat_bytes is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, notsent_lowat_bytes)
        peer = sock.getpeername()
        self.peer_name = f"{peer[0]}:{peer[1]}"
        self._sock = sock
        self._staging = memoryview(bytearray(STAGING_BYTES))
        self._lo = self._hi = 0
        self._closed: str | None = None
        self._read_lock = threading.Lock()
        self._writes: deque[asyncio.Future[int]] = deque()
        self._loop = loop
        # The socket is closed once nothing uses it: the two threads and, while one waits
        # for readiness, the event loop's selector (closing a registered fd would let a new
        # socket reuse its number under the old registration).
        self._users = 2
        self._exit_lock = threading.Lock()
        self._reader = _IoThread(loop, f"tcp-read-{self.peer_name}", self._release)
        self._writer = _IoThread(loop, f"tcp-write-{self.peer_name}", self._release)

    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        await self.readv_into([view], digest)

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        rest = []
        for view in views:  # bytes already staged come first
            taken = self._take_staged(view)
            if digest is not None and taken:
                digest.update(view[:taken])
            if taken < len(view):
                rest.append(view[taken:])
        if sum(len(view) for view in rest) < DIRECT_READ_BYTES:
            for view in rest:
                await self._read_small(view, digest)
            return
        if self._closed is not None:
            raise ConnectionResetError(f"connection is {self._closed}")
        want = sum(len(view) for view in rest)
        got = await self._reader.submit(partial(self._recv_all, rest, digest))
        if got < want:
            raise asyncio.IncompleteReadError(b"", want)

    async def _read_small(self, view: memoryview, digest: Digest | None) -> None:
        """Fill a small `view` through the staging buffer, from the event loop."""
        filled = self._take_staged(view)  # what the previous view's read brought along
        if digest is not None and filled:
            digest.update(view[:filled])
        while filled < len(view):
            if self._closed is not None:
                raise ConnectionResetError(f"connection is {self._closed}")
            rest = view[filled:]
            free = self._staging[self._hi : self._hi + len(rest) + READ_AHEAD_BYTES]
            if self._read_lock.locked():  # a cancelled read still runs: queue behind it
                got = await self._reader.submit(partial(self._recv_some, free))
            elif (ready := self._recv_ready(free)) is None:
                await self._readable()
                continue
            else:
                got = ready
            if got == 0:
                raise asyncio.IncompleteReadError(bytes(view[:filled]), len(view))
            self._hi += got
            taken = self._take_staged(rest)
            if digest is not None:
                digest.update(rest[:taken])
            filled += taken

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        if self._closed is not None:
            raise ConnectionResetError(f"connection is {self._closed}")
        views = [memoryview(part).cast("B") for part in parts]
        written = self._writer.submit(partial(self._send_all, views, before_send))
        written.add_done_callback(_retrieve)
        # Double buffering: return while this write is queued behind the one being sent, so
        # the writer thread always has the next frame at hand; wait only beyond that.
        self._writes.append(written)
        if len(self._writes) > MAX_QUEUED_WRITES:
            await asyncio.wait([self._writes[0]])  # not `await`: cancelling us must not cancel it
        while self._writes and self._writes[0].done():
            self._writes.popleft().result()  # a failed write raises here

    def tcp_info(self) -> TcpInfo | None:
        return read_tcp_info(self._sock)

    def close(self) -> None:
        """Orderly: writes already queued still go out, then both directions shut down."""
        if self._closed is None:
            self._closed = "closed"
            self._writer.stop(final=self._shutdown)
            self._reader.stop()

    def abort(self) -> None:
        if self._closed is None:
            self._closed = "aborted"
            self._writer.stop()
            self._reader.stop()
        self._shutdown()  # wakes both threads out of blocking calls
        if self._read_lock.acquire(timeout=ABORT_READ_WAIT_S):
            self._read_lock.release()

    # -- run on the I/O threads ---------------------------------------------------------------
    def _recv_all(self, views: list[memoryview], digest: Digest | None) -> int:
        """Fill `views` in order (one `recvmsg_into`, MSG_WAITALL, per wake-up), feeding
        `digest` as bytes land; fewer bytes than asked = end of stream (or an abort)."""
        with self._read_lock:
            got = 0
            while views and self._closed != "aborted":
                n = self._sock.recvmsg_into(views, 0, socket.MSG_WAITALL)[0]
                if n == 0:
                    break
                got += n
                while n:
                    head = views[0]
                    size = min(n, len(head))
                    if digest is not None:
                        digest.update(head[:size])
                    n -= size
                    if size == len(head):
                        views.pop(0)
                    else:
                        views[0] = head[size:]
            return got

    def _recv_some(self, view: memoryview) -> int:
        """Whatever has arrived (blocking until something has); 0 = end of stream."""
        with self._read_lock:
            return 0 if self._closed == "aborted" else self._sock.recv_into(view)

    def _send_all(self, views: list[memoryview], before_send: BeforeSend | None) -> int:
        if before_send is not None:
            before_send()
        total = sum(len(v) for v in views)
        while views:
            sent = self._sock.sendmsg(views)
            while views and sent >= len(views[0]):
                sent -= len(views.pop(0))
            if views:
                views[0] = views[0][sent:]
        return total

    def _shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def _release(self) -> None:
        with self._exit_lock:
            self._users -= 1
            if self._users == 0:
                self._sock.close()

    # -- run on the event loop ----------------------------------------------------------------
    def _recv_ready(self, view: memoryview) -> int | None:
        """What has already arrived, read without blocking; None when nothing has."""
        try:
            return self._sock.recv_into(view, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None

    async def _readable(self) -> None:
        """Wait, in the event loop's selector, until the socket has data or an end."""
        with self._exit_lock:
            if self._users == 0:
                raise ConnectionResetError("connection is closed")
            self._users += 1
        fd = self._sock.fileno()
        ready = self._loop.create_future()
        self._loop.add_reader(fd, _settle, ready, 0)
        try:
            await ready
        finally:
            self._loop.remove_reader(fd)
            self._release()

    def _take_staged(self, view: memoryview) -> int:
        size = min(self._hi - self._lo, len(view))
        view[:size] = self._staging[self._lo : self._lo + size]
        self._lo += size
        if self._lo == self._hi:
            self._lo = self._hi = 0
        return size


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
                stream = _SocketStream(conn, self._loop, self._notsent_lowat_bytes)
            except OSError:  # reset between accept and setup (no peer name any more)
                conn.close()
                continue
            task = self._loop.create_task(self._serve(stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: _SocketStream) -> None:
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
                return _SocketStream(sock, loop, self._notsent_lowat_bytes)
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
