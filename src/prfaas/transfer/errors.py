"""The one exception tree of the transfer boundary.

    TransferError
    ├── ConfigError               missing secret, impossible limits, unreadable TLS files
    ├── HandshakeError            a peer was not admitted
    │   ├── AuthenticationError   HMAC challenge-response failed (wrong shared secret)
    │   └── IncompatiblePeerError version, model fingerprint, block size or hash seed differ
    ├── ConnectionLostError       closed, reset or timed-out socket (translated in `framing`)
    ├── FrameError                a malformed frame or a checksum mismatch on a frame header
    ├── TransferAbortedError      one request's transfer ended without its KV: `.reason` says why
    └── LinkEmulationError        `linkemu` could not build a namespace link (tests, benchmarks)

Low-level errors (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError) are turned
into these in exactly one place, `framing.FramedConnection`; nothing else catches them. Callers
(`serve`) treat `HandshakeError` as a configuration fault to surface to the operator, and
`ConnectionLostError` / `TransferAbortedError` as a failed request the scheduler may retry
(locally, on PD-P) because the receiver has already freed every page it held for it.
"""

from __future__ import annotations

from enum import IntEnum


class AbortReason(IntEnum):
    """Why a transfer was aborted; carried in ABORT frames (one byte on the wire)."""

    SENDER_ABORTED = 1
    CHECKSUM_MISMATCH = 2
    STALLED = 3
    CONNECTION_LOST = 4
    OUT_OF_SPACE = 5
    PROTOCOL_VIOLATION = 6
    RECEIVER_CLOSED = 7


class RejectReason(IntEnum):
    """Why a handshake was refused; carried in REJECT frames (one byte on the wire)."""

    VERSION = 1
    AUTHENTICATION = 2
    MODEL_FINGERPRINT = 3
    BLOCK_SIZE = 4
    HASH_SEED = 5
    MALFORMED = 6
    PAYLOAD_CHECKS = 7


class TransferError(Exception):
    """Base of every error raised by `prfaas.transfer`."""


class ConfigError(TransferError):
    pass


class HandshakeError(TransferError):
    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(f"{reason.name.lower()}: {message}")
        self.reason = reason


class AuthenticationError(HandshakeError):
    pass


class IncompatiblePeerError(HandshakeError):
    pass


class ConnectionLostError(TransferError):
    pass


class FrameError(TransferError):
    pass


class TransferAbortedError(TransferError):
    def __init__(self, reason: AbortReason, message: str) -> None:
        super().__init__(f"{reason.name.lower()}: {message}")
        self.reason = reason


def handshake_error(reason: RejectReason, message: str) -> HandshakeError:
    """The most specific HandshakeError for a reject reason (both sides raise the same type)."""
    if reason is RejectReason.AUTHENTICATION:
        return AuthenticationError(reason, message)
    if reason is RejectReason.MALFORMED:
        return HandshakeError(reason, message)
    return IncompatiblePeerError(reason, message)


class LinkEmulationError(TransferError):
    pass
