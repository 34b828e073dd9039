"""Past-tense events the sender and receiver append; owners drain them with `take_events()`.

No callbacks into I/O: the serve layer polls these to free transfer blocks (sender side),
admit requests into the decode batch (receiver side) and export metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.transfer.errors import AbortReason, RejectReason
from prfaas.transfer.keys import RequestId


@dataclass(frozen=True, slots=True)
class TransferCompleted:
    """Sender: the receiver committed every byte; the transfer blocks may be freed."""

    request_id: RequestId
    peer: str
    payload_bytes: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class TransferFailed:
    """Sender: the transfer ended without a commit; `error` is the exception's class name."""

    request_id: RequestId
    peer: str
    error: str
    message: str


@dataclass(frozen=True, slots=True)
class TransferReceived:
    """Receiver: a request's KV is committed in the sink and ready for decode, with the
    prompt's token ids when the sender sent them (`OutgoingTransfer.send_prompt`; None: it
    did not, as a prefix move does not)."""

    request_id: RequestId
    peer: str
    payload_bytes: int
    num_slices: int
    prompt_token_ids: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class TransferAborted:
    """Receiver: a request was abandoned and every page it held was freed."""

    request_id: RequestId
    peer: str
    reason: AbortReason
    message: str


@dataclass(frozen=True, slots=True)
class PeerRefused:
    """Receiver: a connection failed the handshake (`reason` None: it broke off mid-way)."""

    peer: str
    reason: RejectReason | None
    message: str


SenderEvent = TransferCompleted | TransferFailed
ReceiverEvent = TransferReceived | TransferAborted | PeerRefused
