"""Frames over a `Connection`, and the one place low-level errors become `TransferError`s.

`FramedConnection` reads a frame in two steps so payloads can land in pool pages directly:
`read_frame` returns the checked header and metadata; for DATA the caller then chooses the
destination and calls `read_payload_into`. Writes are serialised by a lock so a frame from one
task (an ABORT from the stall watchdog) never interleaves with another's (an ACK).

Error translation: `asyncio.IncompleteReadError` (peer closed), any `OSError` (reset, refused,
timeout, TLS failure) -> ConnectionLostError; a frame that does not parse -> FrameError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import xxhash

from prfaas.transfer.errors import ConnectionLostError, FrameError
from prfaas.transfer.telemetry import TcpInfo
from prfaas.transfer.transport import BeforeSend, Buffer, Connection
from prfaas.transfer.wire import (
    PAYLOAD_KINDS,
    PREFIX,
    FrameKind,
    FramePrefix,
    decode_prefix,
    encode_header,
    set_payload_check,
    verify_header,
)


@contextmanager
def translated_errors(what: str) -> Iterator[None]:
    """Turn transport-level failures into ConnectionLostError, naming what was going on."""
    try:
        yield
    except asyncio.IncompleteReadError as exc:
        raise ConnectionLostError(f"{what}: the peer closed the connection") from exc
    except OSError as exc:
        raise ConnectionLostError(f"{what}: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class Frame:
    """A received frame's checked header; DATA payload bytes are still on the wire."""

    prefix: FramePrefix
    meta: bytes

    @property
    def kind(self) -> FrameKind:
        return self.prefix.kind


class FramedConnection:
    def __init__(self, connection: Connection, payload_checks: bool = True) -> None:
        self._connection = connection
        self._write_lock = asyncio.Lock()
        self._prefix_buffer = bytearray(PREFIX.size)
        self.bytes_sent = 0
        # Whether DATA payloads carry and get a check (`TransferConfig.payload_checks`; the
        # handshake refuses a peer set otherwise).
        self.payload_checks = payload_checks

    @property
    def peer_name(self) -> str:
        return self._connection.peer_name

    async def send(self, kind: FrameKind, meta: bytes, payload: Buffer | None = None) -> None:
        """Send one frame. With payload checks on, a DATA payload's check is computed once,
        from the source bytes, on the thread that sends them, just before they are sent.

        Header and payload go to the connection as separate parts (a scatter-gather write):
        the payload is never copied into a frame buffer."""
        before_send: BeforeSend | None = None
        if payload is None:
            parts: list[Buffer] = [encode_header(kind, meta)]
        else:
            view = memoryview(payload).cast("B")
            header = bytearray(encode_header(kind, meta, len(view)))
            parts = [header, view]
            if self.payload_checks:

                def before_send() -> None:
                    set_payload_check(header, payload_checksum([view]))

        async with self._write_lock:
            with translated_errors(f"sending {kind.name} to {self.peer_name}"):
                await self._connection.write(parts, before_send)
        self.bytes_sent += sum(len(p) for p in parts)

    async def read_frame(self) -> Frame:
        """Next frame header and metadata, checksum-verified. Only DATA and PROMPT frames
        carry a payload (still on the wire: `read_payload_into`)."""
        raw = memoryview(self._prefix_buffer)
        with translated_errors(f"reading from {self.peer_name}"):
            await self._connection.read_into(raw)
            prefix = decode_prefix(bytes(raw))
            meta = bytearray(prefix.meta_len)
            if prefix.meta_len:
                await self._connection.read_into(memoryview(meta))
        verify_header(bytes(raw), prefix, bytes(meta))
        if prefix.kind not in PAYLOAD_KINDS and prefix.payload_len:
            raise FrameError(f"{prefix.kind.name} frame carries a payload")
        return Frame(prefix, bytes(meta))

    async def read_payload_into(self, frame: Frame, views: list[memoryview]) -> bool:
        """Read a DATA or PROMPT `frame`'s payload into consecutive `views` (scatter read);
        True when it matches the frame's check (computed as the bytes land), or when checks
        are off."""
        digest = xxhash.xxh3_64() if self.payload_checks else None
        with translated_errors(f"reading a payload from {self.peer_name}"):
            await self._connection.readv_into(views, digest)
        if digest is None:
            return True
        return digest.intdigest() & 0xFFFFFFFF == frame.prefix.payload_check

    async def discard_payload(self, nbytes: int) -> None:
        """Consume a payload that has nowhere to go (its request was already aborted)."""
        scratch = memoryview(bytearray(min(nbytes, 1 << 20)))
        with translated_errors(f"skipping a payload from {self.peer_name}"):
            while nbytes:
                size = min(nbytes, len(scratch))
                await self._connection.read_into(scratch[:size])
                nbytes -= size

    def tcp_info(self) -> TcpInfo | None:
        return self._connection.tcp_info()

    def close(self) -> None:
        self._connection.close()

    def abort(self) -> None:
        self._connection.abort()


def payload_checksum(views: list[memoryview]) -> int:
    """The frame's payload check (since protocol v2): the low 32 bits of XXH3-64 (seed 0) of the
    concatenated bytes of a scatter list. A random corruption passes with probability 2^-32."""
    state = xxhash.xxh3_64()
    for view in views:
        state.update(view)
    return state.intdigest() & 0xFFFFFFFF
