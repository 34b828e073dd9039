"""Plain TCP's connection: a blocking socket driven from two threads, one per direction.

`TcpTransport` (`transfer.transport`) makes one `SocketStream` per plain TCP connection. The
event loop wakes once per frame rather than once per socket-buffer's worth: a write is one
`sendmsg` of the header and the payload from their own buffers (no concatenation, no copy
into a transport buffer), and a large read is one scatter `recvmsg_into(..., MSG_WAITALL)`
straight into the destination pages; both release the GIL. Small reads (frame headers, ACKs)
go through a staging buffer, from the event loop without blocking, waiting for readiness in
the loop's own selector: no thread hand-off (two context switches) per frame header. Small
writes (ACKs, END, the small DATA frames of a short prompt) go out from the event loop too:
those made in one loop turn are held and sent together at the end of it, in one
non-blocking `sendmsg` (`_flush`), when nothing is queued before them and no payload read
holds the socket (a send takes the kernel's socket lock, which a reader copying a payload
holds, and the event loop must not wait for that); whatever the kernel does not take at
once, and every large write, goes to the writer thread, after what is held. A hand-off
costs two context switches and a wake-up of the loop, and a 1K-token prompt of prfaas-1t
ships 60 small slices, each ACKed (docs/benchmarks.md, "A lighter serving path").

The socket is blocking for the threads, but an event loop may switch it to non-blocking
behind our back: uvloop (libuv) does so for every fd it watches (`_readable`), and the flag
belongs to the socket, not to a thread. So a thread call that meets `EAGAIN` waits for
readiness with `poll` and tries again (`_blocking`) instead of failing the transfer.

Lifecycle: made on a connected socket -> `read_into` / `readv_into` / `write` -> `close`
(orderly) or `abort` (reset); each direction's `_IoThread` exits with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import select
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from prfaas.transfer.telemetry import TcpInfo, read_tcp_info

if TYPE_CHECKING:
    from prfaas.transfer.transport import BeforeSend, Buffer, Digest

STAGING_BYTES = 256 * 1024
# Reads at least this large go to the connection's reader thread; smaller ones are done on the
# event loop with non-blocking calls.
DIRECT_READ_BYTES = 64 * 1024
# A small read on the event loop takes at most this much beyond what was asked for: enough for
# a frame header and a few ACKs behind it, too little to pull a payload's head through the
# staging buffer (a copy the event loop would make while holding the GIL).
READ_AHEAD_BYTES = 8 * 1024
# Writes smaller than this are tried from the event loop first (module doc).
DIRECT_WRITE_BYTES = 64 * 1024
# Small writes held for one `sendmsg` at most (well under the kernel's IOV_MAX of 1024).
MAX_HELD_PARTS = 256
MAX_QUEUED_WRITES = 1
ABORT_READ_WAIT_S = 1.0
# TCP_NOTSENT_LOWAT: a connection's socket holds at most this much not-yet-sent data beyond
# its congestion window; a write blocks until it has drained below it. Frames then wait in
# the link's shared queue, not in one connection's socket buffer, so connections take frames
# at the pace each really sends: none is left with a long private backlog to drain alone,
# more slowly, at the end of a transfer (measured on a 5 Gbit/s 20 ms link, 4 connections).
NOTSENT_LOWAT_BYTES = 1024 * 1024


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


def _unsent(views: list[memoryview], sent: int) -> list[memoryview]:
    """The part of a scatter list past its first `sent` bytes."""
    rest = list(views)
    while rest and sent >= len(rest[0]):
        sent -= len(rest.pop(0))
    if rest and sent:
        rest[0] = rest[0][sent:]
    return rest


def _settle(future: asyncio.Future[int], outcome: int | Exception) -> None:
    if future.done():  # the awaiting coroutine was cancelled
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class SocketStream:
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
        # Small writes of this loop turn, sent together by `_flush` (module doc).
        self._held: list[memoryview] = []
        self._held_bytes = 0
        self._is_flush_due = False
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
        if self._can_write_now(views):
            if before_send is not None:
                before_send()
            self._held.extend(views)
            self._held_bytes += sum(len(view) for view in views)
            if self._held_bytes >= DIRECT_WRITE_BYTES or len(self._held) >= MAX_HELD_PARTS:
                self._flush()  # a caller that never yields still sends
            elif not self._is_flush_due:
                self._is_flush_due = True
                self._loop.call_soon(self._flush)
            return
        self._flush()  # what is held goes first
        written = self._writer.submit(partial(self._send_all, views, before_send))
        written.add_done_callback(_retrieve)
        # Double buffering: return while this write is queued behind the one being sent, so
        # the writer thread always has the next frame at hand; wait only beyond that.
        self._writes.append(written)
        if len(self._writes) > MAX_QUEUED_WRITES:
            await asyncio.wait([self._writes[0]])  # not `await`: cancelling us must not cancel it
        self._pop_written()

    def _flush(self) -> None:
        """Send the small writes held this turn in one non-blocking `sendmsg`; what the
        kernel does not take (or all of it, while a payload read holds the socket) goes to
        the writer thread. A failure fails the next write, as a thread's would."""
        self._is_flush_due = False
        views, self._held, self._held_bytes = self._held, [], 0
        if not views or self._closed is not None:
            return
        try:
            is_busy = self._read_lock.locked() or self._writes  # never overtake a thread write
            sent = 0 if is_busy else self._send_ready(views)
        except OSError as err:
            failed: asyncio.Future[int] = self._loop.create_future()
            failed.set_exception(err)
            self._writes.append(failed)
            return
        if rest := _unsent(views, sent):
            written = self._writer.submit(partial(self._send_all, rest, None))
            written.add_done_callback(_retrieve)
            self._writes.append(written)

    def _pop_written(self) -> None:
        """Forget the writes the thread has finished; a failed one raises here."""
        while self._writes and self._writes[0].done():
            self._writes.popleft().result()

    def _can_write_now(self, views: list[memoryview]) -> bool:
        """Whether this write may go out from the event loop: small, nothing queued on the
        writer thread before it (order), and no payload read holding the socket."""
        self._pop_written()
        return (
            not self._writes
            and not self._read_lock.locked()
            and sum(len(view) for view in views) < DIRECT_WRITE_BYTES
        )

    def tcp_info(self) -> TcpInfo | None:
        return read_tcp_info(self._sock)

    def close(self) -> None:
        """Orderly: writes already queued still go out, then both directions shut down."""
        if self._closed is None:
            self._flush()
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
    def _blocking(self, call: Callable[[], int], events: int) -> int:
        """`call` as on a blocking socket: on `EAGAIN` (an event loop made the socket
        non-blocking, module doc) wait until `events` are ready, then call again."""
        while True:
            try:
                return call()
            except BlockingIOError:
                waiter = select.poll()
                waiter.register(self._sock, events)
                waiter.poll()  # an abort's shutdown wakes it (POLLHUP)

    def _recv_all(self, views: list[memoryview], digest: Digest | None) -> int:
        """Fill `views` in order (one `recvmsg_into`, MSG_WAITALL, per wake-up), feeding
        `digest` as bytes land; fewer bytes than asked = end of stream (or an abort)."""
        with self._read_lock:
            got = 0
            while views and self._closed != "aborted":
                n = self._blocking(partial(self._recv_into_views, views), select.POLLIN)
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

    def _recv_into_views(self, views: list[memoryview]) -> int:
        return int(self._sock.recvmsg_into(views, 0, socket.MSG_WAITALL)[0])

    def _recv_some(self, view: memoryview) -> int:
        """Whatever has arrived (blocking until something has); 0 = end of stream."""
        with self._read_lock:
            if self._closed == "aborted":
                return 0
            return self._blocking(partial(self._sock.recv_into, view), select.POLLIN)

    def _send_all(self, views: list[memoryview], before_send: BeforeSend | None) -> int:
        if before_send is not None:
            before_send()
        total = sum(len(v) for v in views)
        while views:
            sent = self._blocking(partial(self._sock.sendmsg, views), select.POLLOUT)
            views = _unsent(views, sent)
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
    def _send_ready(self, views: list[memoryview]) -> int:
        """What the kernel takes of `views` at once, sent without blocking (0: nothing)."""
        try:
            return self._sock.sendmsg(views, [], socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

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
