"""One sender-side link to one receiver: N TCP connections, a shared frame queue, a window.

    OutgoingTransfer.send_slice ──► queue (bytes_waiting) ──► writer 0..N-1 ──► connection 0..N-1
                                                                  │ window: bytes_in_flight
    OutgoingTransfer.done  ◄── COMPLETED / ABORT ◄── reader 0..N-1 ◄┘ ACK releases the window

Frames of one request are striped over all connections (whichever writer is free takes the next
frame), so one large request fills the link (paper section 3: several TCP connections). The
window bounds bytes written but not yet acknowledged by the receiver: backpressure lives here,
not in unbounded socket buffers. An optional token bucket paces writes for link emulation.

Lifecycle: CONNECTING -> UP -> FAILED | CLOSED. Any connection's failure fails the whole link
(the receiver aborts the same session's requests and frees their pages); the `Sender` opens a
fresh link, with a fresh handshake, for the next transfer (never a stale peer's state: a
restarted peer is a new session).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from prfaas.transfer.config import TransferConfig
from prfaas.transfer.errors import (
    AbortReason,
    ConnectionLostError,
    FrameError,
    HandshakeError,
    TransferAbortedError,
    TransferError,
)
from prfaas.transfer.framing import FramedConnection
from prfaas.transfer.handshake import client_handshake
from prfaas.transfer.keys import RequestId, SessionId
from prfaas.transfer.telemetry import LinkSignals, RateMeter, TokenBucket, aggregate_tcp_info
from prfaas.transfer.transport import PeerAddress, Transport
from prfaas.transfer.waiters import Waiters
from prfaas.transfer.wire import SESSION_ID_BYTES, Abort, FrameKind, PeerIdentity, RequestMark

if TYPE_CHECKING:
    from prfaas.transfer.sender import OutgoingTransfer


class LinkState(Enum):
    CONNECTING = "connecting"
    UP = "up"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(slots=True)
class QueuedFrame:
    transfer: OutgoingTransfer
    kind: FrameKind
    meta: bytes
    payload: memoryview | None = None
    seq: int = 0

    @property
    def payload_bytes(self) -> int:
        return 0 if self.payload is None else len(self.payload)


class PeerLink:
    def __init__(
        self, address: PeerAddress, config: TransferConfig, identity: PeerIdentity
    ) -> None:
        self.address = address
        self.state = LinkState.CONNECTING
        self._config = config
        self._identity = identity
        self._loop = asyncio.get_running_loop()
        self._session_id = SessionId(secrets.token_bytes(SESSION_ID_BYTES))
        self._connections: list[FramedConnection] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._queue: deque[QueuedFrame] = deque()
        self._changed = Waiters()
        self.transfers: dict[RequestId, OutgoingTransfer] = {}
        self.bytes_waiting = 0
        self.bytes_in_flight = 0
        self._acked = RateMeter(config.telemetry_window_s)
        self._bucket = (
            TokenBucket(config.rate_limit_bytes_per_s, config.rate_burst_bytes, self.now_s())
            if config.rate_limit_bytes_per_s
            else None
        )

    def now_s(self) -> float:
        return self._loop.time()

    async def connect(self, transport: Transport) -> None:
        """Open and authenticate every connection; any failure closes them all and raises.

        Every handshake runs to its end (each is bounded by its timeout) before any connection
        is torn down: aborting the siblings of the first refused one would show the receiver
        bare ends of stream instead of each connection's own REJECT."""
        try:
            outcomes = await asyncio.gather(
                *(self._open(transport, i) for i in range(self._config.num_connections)),
                return_exceptions=True,
            )
        except BaseException:  # cancelled while connecting
            self.close()
            raise
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:
            self.close()
            raise failures[0]
        self._connections = [o for o in outcomes if not isinstance(o, BaseException)]
        for conn in self._connections:
            self._tasks.append(self._loop.create_task(self._write_loop(conn)))
            self._tasks.append(self._loop.create_task(self._read_loop(conn)))
        self.state = LinkState.UP

    async def _open(self, transport: Transport, index: int) -> FramedConnection:
        try:
            raw = await transport.connect(self.address)
        except OSError as exc:
            raise ConnectionLostError(f"cannot connect to {self.address}: {exc!r}") from exc
        c = self._config
        conn = FramedConnection(raw, c.payload_checks)
        self._connections.append(conn)
        try:
            await client_handshake(
                conn,
                secret=c.secret,
                identity=self._identity,
                payload_checks=c.payload_checks,
                session_id=self._session_id,
                connection_index=index,
                timeout_s=c.handshake_timeout_s,
            )
        except HandshakeError:
            # Closed in order, not aborted with the rest (`close` -> `_teardown`): the REJECT
            # telling the receiver why may still be queued behind the socket, and an abort
            # would drop it, leaving the receiver with a bare end of stream.
            self._connections.remove(conn)
            conn.close()
            raise
        return conn

    # -- producer side ------------------------------------------------------------------------
    def enqueue(self, frame: QueuedFrame, *, urgent: bool = False) -> None:
        if self.state is not LinkState.UP:
            raise ConnectionLostError(f"link to {self.address} is {self.state.value}")
        if urgent:
            self._queue.appendleft(frame)
        else:
            self._queue.append(frame)
        self.bytes_waiting += frame.payload_bytes
        self._changed.wake()

    async def wait_for_room(self) -> None:
        """Backpressure for producers: wait while the backlog exceeds max_waiting_bytes."""
        while self.state is LinkState.UP and self.bytes_waiting > self._config.max_waiting_bytes:
            await self._changed.wait()

    # -- writers and readers ------------------------------------------------------------------
    async def _write_loop(self, conn: FramedConnection) -> None:
        try:
            while True:
                while not self._queue:
                    await self._changed.wait()
                frame = self._queue.popleft()
                self.bytes_waiting -= frame.payload_bytes
                self._changed.wake()
                if frame.kind is not FrameKind.ABORT and frame.transfer.is_done:
                    continue
                await self._send(conn, frame)
        except TransferError as exc:
            self.fail(exc)

    async def _send(self, conn: FramedConnection, frame: QueuedFrame) -> None:
        size = frame.payload_bytes
        limit = self._config.max_bytes_in_flight
        while self.bytes_in_flight and self.bytes_in_flight + size > limit:
            await self._changed.wait()
        self.bytes_in_flight += size
        if self._bucket is not None:
            delay_s = self._bucket.delay_s(size + len(frame.meta), self.now_s())
            if delay_s > 0:
                await asyncio.sleep(delay_s)
        await conn.send(frame.kind, frame.meta, frame.payload)

    async def _read_loop(self, conn: FramedConnection) -> None:
        try:
            while True:
                frame = await conn.read_frame()
                if frame.kind is FrameKind.ACK:
                    self._on_ack(RequestMark.decode(frame.meta))
                elif frame.kind is FrameKind.COMPLETED:
                    mark = RequestMark.decode(frame.meta)
                    transfer = self.transfers.pop(mark.request_id, None)
                    if transfer is not None:
                        transfer.complete(mark.total_bytes)
                elif frame.kind is FrameKind.ABORT:
                    abort = Abort.decode(frame.meta)
                    transfer = self.transfers.pop(abort.request_id, None)
                    if transfer is not None:
                        transfer.fail(TransferAbortedError(abort.reason, abort.message))
                else:
                    raise FrameError(f"unexpected {frame.kind.name} frame from the receiver")
        except TransferError as exc:
            self.fail(exc)

    def _on_ack(self, mark: RequestMark) -> None:
        self.bytes_in_flight -= mark.total_bytes
        self._acked.add(mark.total_bytes, self.now_s())
        transfer = self.transfers.get(mark.request_id)
        if transfer is not None:
            transfer.acked_bytes += mark.total_bytes
        self._changed.wake()

    # -- teardown and telemetry ---------------------------------------------------------------
    def fail(self, exc: TransferError) -> None:
        """Fail the link and every transfer on it; idempotent."""
        if self.state in (LinkState.FAILED, LinkState.CLOSED):
            return
        self.state = LinkState.FAILED
        lost = exc if isinstance(exc, ConnectionLostError) else ConnectionLostError(str(exc))
        self._teardown(lost)

    def close(self) -> None:
        if self.state is LinkState.UP or self.state is LinkState.CONNECTING:
            self.state = LinkState.CLOSED
            self._teardown(TransferAbortedError(AbortReason.SENDER_ABORTED, "sender closed"))

    def _teardown(self, exc: TransferError) -> None:
        for transfer in list(self.transfers.values()):
            transfer.fail(exc)
        self.transfers.clear()
        self._queue.clear()
        self.bytes_waiting = 0
        for conn in self._connections:
            conn.abort()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._changed.wake()

    def signals(self) -> LinkSignals:
        now_s = self.now_s()
        infos = [i for i in (c.tcp_info() for c in self._connections) if i is not None]
        rtt_s, min_rtt_s, retransmits, delivery = aggregate_tcp_info(infos)
        return LinkSignals(
            peer=str(self.address),
            measured_at_s=now_s,
            num_connections=len(self._connections),
            egress_bytes_per_s=self._acked.rate_bytes_per_s(now_s),
            bytes_waiting=self.bytes_waiting,
            bytes_in_flight=self.bytes_in_flight,
            bytes_acked_total=self._acked.total_bytes,
            rtt_s=rtt_s,
            min_rtt_s=min_rtt_s,
            retransmitted_segments=retransmits,
            kernel_delivery_rate_bytes_per_s=delivery,
        )
