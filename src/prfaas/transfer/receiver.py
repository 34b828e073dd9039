"""The decode side: admit peers, verify frames, write KV into the pool, reassemble, commit.

Per request, frames may arrive on any of the session's connections in any order; a request is
complete when END has arrived and the counted frames and bytes, and every slice, are in:

    [PROMPT] DATA ... DATA (conn 0..N-1)  +  END(frames=F, bytes=B)
                                        ->  sink.commit, COMPLETED, event (with the prompt)
    bad payload checksum / out of pages / stall / sender ABORT / lost connection
                                        ->  sink.free, ABORT back, event

A PROMPT frame (at most one per request, counted in END like a DATA frame) carries the
request's prompt token ids; they are held with the request, not in the sink, and handed over
in its `TransferReceived`. One above `MAX_PROMPT_TOKENS` is a FrameError before any byte of it
is read (the session is dropped: a peer that sends one is broken); a second one, or one that
is not whole uint32s, aborts its request.

Every DATA frame read is acknowledged (ACK) on its connection, even one that is discarded,
so the sender's window always drains. Pages are allocated on a slice's first frame and
freed on every failure path: after `close()` or any fault, the sink holds nothing uncommitted.
A page a payload is still landing in (on another connection) is freed when that read ends,
never before, so it cannot be handed to another request while bytes still arrive in it.

Sessions: all connections of one sender link share a session id (from HELLO). Losing any of
them aborts all of that session's requests, because frames in flight on it are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from dataclasses import dataclass, field

from prfaas.transfer.config import TransferConfig
from prfaas.transfer.errors import (
    AbortReason,
    FrameError,
    HandshakeError,
    TransferError,
)
from prfaas.transfer.events import (
    PeerRefused,
    ReceiverEvent,
    TransferAborted,
    TransferReceived,
)
from prfaas.transfer.framing import Frame, FramedConnection
from prfaas.transfer.handshake import server_handshake
from prfaas.transfer.keys import RequestId, SessionId, SliceKey, SliceMeta
from prfaas.transfer.sink import PageSink
from prfaas.transfer.transport import Connection, Listener, PeerAddress, Transport
from prfaas.transfer.waiters import Waiters
from prfaas.transfer.wire import (
    MAX_PROMPT_TOKENS,
    TOKEN_ID_BYTES,
    Abort,
    DataHeader,
    FrameKind,
    PeerIdentity,
    RequestMark,
    decode_prompt,
)

MAX_TOMBSTONES = 4096


@dataclass(slots=True)
class _Slice:
    meta: SliceMeta
    views: list[memoryview]
    received_bytes: int = 0


@dataclass(slots=True)
class _Incoming:
    request_id: RequestId
    last_progress_s: float
    slices: dict[SliceKey, _Slice] = field(default_factory=dict)
    num_frames: int = 0
    received_bytes: int = 0
    expected: RequestMark | None = None
    reads_in_flight: int = 0
    is_aborted: bool = False
    prompt: tuple[int, ...] | None = None


@dataclass(slots=True)
class _Session:
    session_id: SessionId
    peer: str
    connections: list[FramedConnection] = field(default_factory=list)
    requests: dict[RequestId, _Incoming] = field(default_factory=dict)
    tombstones: OrderedDict[RequestId, None] = field(default_factory=OrderedDict)
    is_dropped: bool = False


def _prompt_problem(request: _Incoming | None, mark: RequestMark, nbytes: int) -> str:
    """Why a PROMPT frame breaks the protocol for its request ("" when it does not)."""
    if request is None:
        return ""  # a late frame of an aborted request: discarded without a word
    rid = request.request_id
    if request.prompt is not None:
        return f"a second PROMPT for {rid}"
    if mark.total_bytes != nbytes or nbytes % TOKEN_ID_BYTES:
        return f"the PROMPT of {rid} is {nbytes} bytes (says {mark.total_bytes}): not uint32s"
    return ""


def _subviews(views: list[memoryview], offset: int, nbytes: int) -> list[memoryview]:
    """The part [offset, offset + nbytes) of a scatter list, as views into the same pages."""
    out = []
    for view in views:
        if nbytes == 0:
            break
        if offset >= len(view):
            offset -= len(view)
            continue
        part = view[offset : offset + nbytes]
        out.append(part)
        nbytes -= len(part)
        offset = 0
    return out


class Receiver:
    def __init__(
        self, config: TransferConfig, identity: PeerIdentity, transport: Transport, sink: PageSink
    ) -> None:
        self._config = config
        self._identity = identity
        self._transport = transport
        self._sink = sink
        self._sessions: dict[SessionId, _Session] = {}
        self._events: list[ReceiverEvent] = []
        self._new_events = Waiters()
        self._listener: Listener | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def start(self, address: PeerAddress) -> PeerAddress:
        """Listen on `address` (port 0 picks one); returns the bound address."""
        self._listener = await self._transport.listen(address, self._serve)
        self._watchdog = asyncio.get_running_loop().create_task(self._watch_stalls())
        return self._listener.address

    async def close(self) -> None:
        """Stop listening, drop every session and free every uncommitted page."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        for session in list(self._sessions.values()):
            self._drop_session(session, AbortReason.RECEIVER_CLOSED, "receiver closed")
        if self._listener is not None:
            await self._listener.close()

    def take_events(self) -> list[ReceiverEvent]:
        events, self._events = self._events, []
        return events

    async def wait_for_events(self) -> None:
        """Return once at least one event is waiting to be taken."""
        while not self._events:
            await self._new_events.wait()

    @property
    def num_active_requests(self) -> int:
        return sum(len(s.requests) for s in self._sessions.values())

    def _emit(self, event: ReceiverEvent) -> None:
        self._events.append(event)
        self._new_events.wake()

    # -- connections ---------------------------------------------------------------------------
    async def _serve(self, raw: Connection) -> None:
        c = self._config
        conn = FramedConnection(raw, c.payload_checks)
        try:
            hello = await server_handshake(
                conn, c.secret, self._identity, c.payload_checks, c.handshake_timeout_s
            )
        except TransferError as exc:
            refusal = exc.reason if isinstance(exc, HandshakeError) else None
            self._emit(PeerRefused(conn.peer_name, refusal, str(exc)))
            conn.close()
            return
        session = self._sessions.get(hello.session_id)
        if session is None:
            session = _Session(hello.session_id, conn.peer_name)
            self._sessions[hello.session_id] = session
        session.connections.append(conn)
        try:
            # A frame read on one connection while another dropped the session is not acted on:
            # it would begin a request (and take pages) in a session nobody will free again.
            while not session.is_dropped:
                frame = await conn.read_frame()
                if not session.is_dropped:
                    await self._on_frame(session, conn, frame)
        except TransferError as exc:
            reason = (
                AbortReason.PROTOCOL_VIOLATION
                if isinstance(exc, FrameError)
                else AbortReason.CONNECTION_LOST
            )
            self._drop_session(session, reason, str(exc))

    async def _on_frame(self, session: _Session, conn: FramedConnection, frame: Frame) -> None:
        if frame.kind is FrameKind.DATA:
            await self._on_data(session, conn, frame)
        elif frame.kind is FrameKind.PROMPT:
            await self._on_prompt(session, conn, frame)
        elif frame.kind is FrameKind.END:
            mark = RequestMark.decode(frame.meta)
            request = session.requests.get(mark.request_id)
            if request is None and mark.request_id not in session.tombstones:
                request = self._begin(session, mark.request_id)
            if request is not None:
                request.expected = mark
                await self._complete_if_ready(session, conn, request)
        elif frame.kind is FrameKind.ABORT:
            abort = Abort.decode(frame.meta)
            await self._abort(session, abort.request_id, AbortReason.SENDER_ABORTED, abort.message)
        else:
            raise FrameError(f"unexpected {frame.kind.name} frame from a sender")

    def _begin(self, session: _Session, request_id: RequestId) -> _Incoming:
        request = _Incoming(request_id, asyncio.get_running_loop().time())
        session.requests[request_id] = request
        return request

    # -- data ----------------------------------------------------------------------------------
    async def _on_data(self, session: _Session, conn: FramedConnection, frame: Frame) -> None:
        header = DataHeader.decode(frame.meta)
        nbytes = frame.prefix.payload_len
        rid = header.request_id
        request = session.requests.get(rid)
        if request is None and rid not in session.tombstones:
            request = self._begin(session, rid)
        views = (
            None if request is None else await self._destination(session, request, header, nbytes)
        )
        if request is None or views is None:
            await conn.discard_payload(nbytes)
        else:
            intact = await self._read_payload(conn, frame, request, views)
            if request.is_aborted:
                pass  # aborted (from another connection) while the payload landed: drop it
            elif not intact:
                message = f"payload checksum mismatch in frame {header.seq} of {rid}"
                await self._abort(session, rid, AbortReason.CHECKSUM_MISMATCH, message, conn)
            else:
                request.slices[header.slice.key].received_bytes += nbytes
                request.num_frames += 1
                request.received_bytes += nbytes
                request.last_progress_s = asyncio.get_running_loop().time()
        await conn.send(FrameKind.ACK, RequestMark(rid, header.seq, nbytes).encode())
        if request is not None and rid in session.requests:
            await self._complete_if_ready(session, conn, request)

    async def _on_prompt(self, session: _Session, conn: FramedConnection, frame: Frame) -> None:
        """The request's prompt ids, kept with it until its commit hands them over."""
        mark, nbytes = RequestMark.decode(frame.meta), frame.prefix.payload_len
        if nbytes > MAX_PROMPT_TOKENS * TOKEN_ID_BYTES:
            raise FrameError(f"a PROMPT of {nbytes} bytes exceeds {MAX_PROMPT_TOKENS} tokens")
        rid = mark.request_id
        request = session.requests.get(rid)
        if request is None and rid not in session.tombstones:
            request = self._begin(session, rid)
        problem = _prompt_problem(request, mark, nbytes)
        if request is None or problem:
            await conn.discard_payload(nbytes)
            if problem:
                await self._abort(session, rid, AbortReason.PROTOCOL_VIOLATION, problem, conn)
        else:
            payload = bytearray(nbytes)
            intact = await conn.read_payload_into(frame, [memoryview(payload)])
            if request.is_aborted:
                pass  # aborted (from another connection) while the payload landed
            elif not intact:
                message = f"payload checksum mismatch in the PROMPT of {rid}"
                await self._abort(session, rid, AbortReason.CHECKSUM_MISMATCH, message, conn)
            else:
                request.prompt = decode_prompt(bytes(payload))
                request.num_frames += 1
                request.received_bytes += nbytes
                request.last_progress_s = asyncio.get_running_loop().time()
        await conn.send(FrameKind.ACK, RequestMark(rid, mark.count, nbytes).encode())
        if request is not None and rid in session.requests:
            await self._complete_if_ready(session, conn, request)

    async def _read_payload(
        self, conn: FramedConnection, frame: Frame, request: _Incoming, views: list[memoryview]
    ) -> bool:
        """Read into the request's pages (True: the payload passed its check); an abort
        meanwhile defers freeing them to the end of the read, so pages still being written are
        never handed to another request."""
        request.reads_in_flight += 1
        try:
            return await conn.read_payload_into(frame, views)
        finally:
            request.reads_in_flight -= 1
            if request.is_aborted and request.reads_in_flight == 0:
                self._sink.free(request.request_id)

    def _free(self, request: _Incoming) -> None:
        """Forget an aborted request; its pages go back now or when its last read ends."""
        request.is_aborted = True
        if request.reads_in_flight == 0:
            self._sink.free(request.request_id)

    async def _destination(
        self, session: _Session, request: _Incoming, header: DataHeader, nbytes: int
    ) -> list[memoryview] | None:
        """Pages for this chunk, allocating the slice on its first chunk; None after an abort."""
        meta, rid = header.slice, request.request_id
        if header.offset_bytes + nbytes > meta.nbytes:
            message = f"chunk [{header.offset_bytes}, +{nbytes}) overruns {meta.nbytes} bytes"
            await self._abort(session, rid, AbortReason.PROTOCOL_VIOLATION, message)
            return None
        state = request.slices.get(meta.key)
        if state is None:
            views = self._sink.allocate(rid, meta)
            if views is None:
                message = f"no pages for {meta.nbytes} bytes of {meta.key}"
                await self._abort(session, rid, AbortReason.OUT_OF_SPACE, message)
                return None
            state = _Slice(meta, list(views))
            request.slices[meta.key] = state
        elif state.meta != meta:
            message = f"slice {meta.key} changed its dtype, shape or size mid-transfer"
            await self._abort(session, rid, AbortReason.PROTOCOL_VIOLATION, message)
            return None
        return _subviews(state.views, header.offset_bytes, nbytes)

    async def _complete_if_ready(
        self, session: _Session, conn: FramedConnection, request: _Incoming
    ) -> None:
        expected = request.expected
        if expected is None or request.num_frames < expected.count:
            return
        rid = request.request_id
        is_whole = all(s.received_bytes == s.meta.nbytes for s in request.slices.values())
        if request.received_bytes != expected.total_bytes or not is_whole:
            message = f"{rid}: END says {expected.total_bytes} bytes, {request.received_bytes} came"
            await self._abort(session, rid, AbortReason.PROTOCOL_VIOLATION, message, conn)
            return
        del session.requests[rid]
        self._sink.commit(rid)
        received = TransferReceived(
            rid, session.peer, request.received_bytes, len(request.slices), request.prompt
        )
        self._emit(received)
        mark = RequestMark(rid, request.num_frames, request.received_bytes)
        await conn.send(FrameKind.COMPLETED, mark.encode())

    # -- failure paths ---------------------------------------------------------------------------
    async def _abort(
        self,
        session: _Session,
        request_id: RequestId,
        reason: AbortReason,
        message: str,
        conn: FramedConnection | None = None,
    ) -> None:
        """Free the request's pages, remember its id (late frames are discarded), tell the
        sender unless it asked for the abort itself."""
        session.tombstones[request_id] = None
        while len(session.tombstones) > MAX_TOMBSTONES:
            session.tombstones.popitem(last=False)
        request = session.requests.pop(request_id, None)
        if request is not None:
            self._free(request)
        self._emit(TransferAborted(request_id, session.peer, reason, message))
        if reason is AbortReason.SENDER_ABORTED:
            return
        targets = [conn] if conn is not None else session.connections[:1]
        for target in targets:
            # Best effort: if this fails too, the sender learns from the lost connection.
            with contextlib.suppress(TransferError):
                await target.send(FrameKind.ABORT, Abort(request_id, reason, message).encode())

    def _drop_session(self, session: _Session, reason: AbortReason, message: str) -> None:
        if session.is_dropped:
            return
        session.is_dropped = True
        del self._sessions[session.session_id]
        for request_id, request in list(session.requests.items()):
            del session.requests[request_id]
            self._free(request)
            self._emit(TransferAborted(request_id, session.peer, reason, message))
        for conn in session.connections:
            conn.abort()

    async def _watch_stalls(self) -> None:
        """Abort requests that made no progress for stall_timeout_s (a stuck or dead sender)."""
        timeout_s = self._config.stall_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(timeout_s / 4, 1.0))
            now_s = loop.time()
            for session in list(self._sessions.values()):
                for request in list(session.requests.values()):
                    if now_s - request.last_progress_s > timeout_s:
                        message = f"no progress for {now_s - request.last_progress_s:.1f} s"
                        await self._abort(session, request.request_id, AbortReason.STALLED, message)
