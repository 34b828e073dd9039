"""The prefill side: stream a request's KV, layer by layer, to a decode instance.

    sender = Sender(config, identity, TcpTransport())
    transfer = await sender.start_transfer(peer, RequestId("req-1"))
    await transfer.send_prompt(token_ids)            # optional, once: the decode side's prompt
    for layer in range(num_layers):                  # as each layer finishes computing
        await transfer.send_slice(key, "float16", shape, layer_kv)
    await transfer.finish()                          # END, then wait for COMPLETED
    sender.take_events()  -> [TransferCompleted(...)]  the transfer blocks may be freed now

`send_slice` does not copy: the buffer is referenced until the receiver has acknowledged it,
which is why the kvcache pool pins transfer blocks until `TransferCompleted` / `TransferFailed`.
It returns as soon as the frames are queued (layer-wise pipelining: the next layer computes
while this one is on the wire) and only waits when the peer's backlog exceeds
`max_waiting_bytes` (backpressure).

Failure: `finish` raises the TransferError that ended the transfer (ConnectionLostError,
TransferAbortedError with the receiver's reason, HandshakeError from `start_transfer`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from prfaas.transfer.config import TransferConfig
from prfaas.transfer.errors import (
    AbortReason,
    ConnectionLostError,
    TransferAbortedError,
    TransferError,
)
from prfaas.transfer.events import SenderEvent, TransferCompleted, TransferFailed
from prfaas.transfer.keys import RequestId, SliceKey, SliceMeta
from prfaas.transfer.link import LinkState, PeerLink, QueuedFrame
from prfaas.transfer.telemetry import LinkSignals
from prfaas.transfer.transport import Buffer, PeerAddress, Transport
from prfaas.transfer.wire import (
    Abort,
    DataHeader,
    FrameKind,
    PeerIdentity,
    RequestMark,
    encode_prompt,
)


class OutgoingTransfer:
    """One request's KV on its way to one peer."""

    def __init__(
        self,
        link: PeerLink,
        request_id: RequestId,
        max_frame_bytes: int,
        events: list[SenderEvent],
    ) -> None:
        self.request_id = request_id
        self._link = link
        self._max_frame_bytes = max_frame_bytes
        self._started_s = link.now_s()
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._num_frames = 0
        self.queued_bytes = 0
        self.acked_bytes = 0
        self._is_finished = False
        self._has_prompt = False
        self._events = events

    @property
    def is_done(self) -> bool:
        return self._done.done()

    async def send_slice(
        self, key: SliceKey, dtype: str, shape: tuple[int, ...], payload: Buffer
    ) -> None:
        """Queue one slice (C-order bytes of `shape`), split into frames of max_frame_bytes."""
        if self._is_finished:
            raise ValueError(f"{self.request_id}: send_slice after finish")
        self._raise_if_done()
        await self._link.wait_for_room()
        self._raise_if_done()
        view = memoryview(payload).cast("B")
        meta = SliceMeta(key, dtype, shape, len(view))
        offsets = range(0, max(len(view), 1), self._max_frame_bytes)
        for offset in offsets:
            chunk = view[offset : offset + self._max_frame_bytes]
            header = DataHeader(self.request_id, self._num_frames, meta, offset)
            frame = QueuedFrame(self, FrameKind.DATA, header.encode(), chunk, self._num_frames)
            self._link.enqueue(frame)
            self._num_frames += 1
            self.queued_bytes += len(chunk)

    async def send_prompt(self, token_ids: Sequence[int]) -> None:
        """Queue the request's prompt token ids (one PROMPT frame, at most once): the
        receiver hands them over with the committed KV (`TransferReceived.prompt_token_ids`),
        so the decode side learns the prompt from this stream."""
        if self._is_finished or self._has_prompt:
            raise ValueError(f"{self.request_id}: send_prompt after finish or twice")
        payload = memoryview(encode_prompt(token_ids))
        self._raise_if_done()
        await self._link.wait_for_room()
        self._raise_if_done()
        self._has_prompt = True
        mark = RequestMark(self.request_id, self._num_frames, len(payload))
        frame = QueuedFrame(self, FrameKind.PROMPT, mark.encode(), payload, self._num_frames)
        self._link.enqueue(frame)
        self._num_frames += 1
        self.queued_bytes += len(payload)

    async def finish(self) -> None:
        """Send END and wait until the receiver commits (or the transfer fails)."""
        if not self._is_finished:
            self._is_finished = True
            if not self.is_done:
                mark = RequestMark(self.request_id, self._num_frames, self.queued_bytes)
                self._link.enqueue(QueuedFrame(self, FrameKind.END, mark.encode()))
        await asyncio.shield(self._done)

    async def abort(self, message: str = "aborted by the sender") -> None:
        """Give up: the receiver frees the request's pages; `finish` raises."""
        if self.is_done:
            return
        self.fail(TransferAbortedError(AbortReason.SENDER_ABORTED, message))
        abort = Abort(self.request_id, AbortReason.SENDER_ABORTED, message)
        # If the link is gone, the receiver frees the pages on its own.
        with contextlib.suppress(ConnectionLostError):
            self._link.enqueue(QueuedFrame(self, FrameKind.ABORT, abort.encode()), urgent=True)

    # -- called by the link -------------------------------------------------------------------
    def complete(self, received_bytes: int) -> None:
        if self.is_done:
            return
        # COMPLETED acknowledges every byte, even if some frame's own ACK, sent on another
        # connection, has not been read yet (connections are not ordered with each other).
        self.acked_bytes = received_bytes
        duration_s = self._link.now_s() - self._started_s
        peer = str(self._link.address)
        self._events.append(TransferCompleted(self.request_id, peer, received_bytes, duration_s))
        self._done.set_result(received_bytes)

    def fail(self, exc: TransferError) -> None:
        if self.is_done:
            return
        peer = str(self._link.address)
        self._events.append(TransferFailed(self.request_id, peer, type(exc).__name__, str(exc)))
        self._done.set_exception(exc)
        self._done.exception()  # mark retrieved: a caller that never finishes is not a bug
        self._link.transfers.pop(self.request_id, None)

    def _raise_if_done(self) -> None:
        if self.is_done:
            exc = self._done.exception()
            raise exc if exc is not None else ValueError(f"{self.request_id} already completed")


class Sender:
    """Outgoing transfers to any number of peers, one `PeerLink` (N connections) per peer."""

    def __init__(
        self, config: TransferConfig, identity: PeerIdentity, transport: Transport
    ) -> None:
        self._config = config
        self._identity = identity
        self._transport = transport
        self._links: dict[PeerAddress, PeerLink] = {}
        self._connecting: dict[PeerAddress, asyncio.Lock] = {}
        self._events: list[SenderEvent] = []

    async def start_transfer(self, peer: PeerAddress, request_id: RequestId) -> OutgoingTransfer:
        """A new transfer on the link to `peer`, connecting (and handshaking) if needed."""
        link = await self._link(peer)
        if request_id in link.transfers:
            raise ValueError(f"{request_id} is already in transfer to {peer}")
        transfer = OutgoingTransfer(link, request_id, self._config.max_frame_bytes, self._events)
        link.transfers[request_id] = transfer
        return transfer

    async def _link(self, peer: PeerAddress) -> PeerLink:
        lock = self._connecting.setdefault(peer, asyncio.Lock())
        async with lock:
            link = self._links.get(peer)
            if link is None or link.state is not LinkState.UP:
                link = PeerLink(peer, self._config, self._identity)
                self._links[peer] = link
                try:
                    await link.connect(self._transport)
                except BaseException:
                    del self._links[peer]
                    raise
            return link

    @property
    def num_active_transfers(self) -> int:
        """Transfers started and not yet completed or failed, over every link."""
        return sum(len(link.transfers) for link in self._links.values())

    def link_signals(self) -> list[LinkSignals]:
        """Telemetry for every live link, for the scheduler."""
        return [link.signals() for link in self._links.values() if link.state is LinkState.UP]

    def take_events(self) -> list[SenderEvent]:
        """Completed and failed transfers since the last call, in the order they ended."""
        events = list(self._events)
        self._events.clear()  # the list is shared with live transfers: empty it in place
        return events

    async def close(self) -> None:
        """Close every link; transfers still running fail with SENDER_ABORTED."""
        for link in self._links.values():
            link.close()
        self._links.clear()
        await asyncio.sleep(0)
