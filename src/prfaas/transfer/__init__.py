"""KV transfer between clusters: layer-wise streaming of hybrid KVCache over commodity TCP.

Implements the transport of paper section 3: layer-wise pipelining (slices leave as layers
finish), several TCP connections per peer, and congestion telemetry (`LinkSignals`) for the
scheduler. Wire protocol: docs/protocol.md. Errors: `prfaas.transfer.errors`.

Callers: `serve` builds one `Sender` per prefill instance and one `Receiver` per decode
instance (writing into the decode pool through `PageSink`); tests and benchmarks use the
in-memory transport and `linkemu` (shaped links in network namespaces).
"""

from __future__ import annotations

from prfaas.transfer.config import TlsConfig, TransferConfig, resolve_secret
from prfaas.transfer.errors import (
    AbortReason,
    AuthenticationError,
    ConfigError,
    ConnectionLostError,
    FrameError,
    HandshakeError,
    IncompatiblePeerError,
    RejectReason,
    TransferAbortedError,
    TransferError,
)
from prfaas.transfer.events import (
    PeerRefused,
    ReceiverEvent,
    SenderEvent,
    TransferAborted,
    TransferCompleted,
    TransferFailed,
    TransferReceived,
)
from prfaas.transfer.handshake import checkpoint_fingerprint, identity_for, model_fingerprint
from prfaas.transfer.keys import RequestId, SliceKey, SliceMeta
from prfaas.transfer.memory import MemoryTransport
from prfaas.transfer.receiver import Receiver
from prfaas.transfer.sender import OutgoingTransfer, Sender
from prfaas.transfer.sink import ArraySink, PageSink
from prfaas.transfer.telemetry import LinkSignals, TcpInfo
from prfaas.transfer.transport import Connection, PeerAddress, TcpTransport, Transport
from prfaas.transfer.wire import PROTOCOL_VERSION, PeerIdentity

__all__ = [
    "PROTOCOL_VERSION",
    "AbortReason",
    "ArraySink",
    "AuthenticationError",
    "ConfigError",
    "Connection",
    "ConnectionLostError",
    "FrameError",
    "HandshakeError",
    "IncompatiblePeerError",
    "LinkSignals",
    "MemoryTransport",
    "OutgoingTransfer",
    "PageSink",
    "PeerAddress",
    "PeerIdentity",
    "PeerRefused",
    "Receiver",
    "ReceiverEvent",
    "RejectReason",
    "RequestId",
    "Sender",
    "SenderEvent",
    "SliceKey",
    "SliceMeta",
    "TcpInfo",
    "TcpTransport",
    "TlsConfig",
    "TransferAborted",
    "TransferAbortedError",
    "TransferCompleted",
    "TransferConfig",
    "TransferError",
    "TransferFailed",
    "TransferReceived",
    "Transport",
    "checkpoint_fingerprint",
    "identity_for",
    "model_fingerprint",
    "resolve_secret",
]
