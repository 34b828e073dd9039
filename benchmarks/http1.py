"""Just enough HTTP/1.1 over asyncio streams for the router-overhead benchmark's load client,
its fixed-cost OpenAI worker and its counting proxy (`router_overhead.py`).

Why not httpx or uvicorn: the figure measured is a router's cost of a millisecond or less per
request, on a 2-core host the load client shares with the routers; httpx's async client spends
about that much CPU per streamed request itself, so it would cap every router at the same rate
and measure the client. These helpers do one thing each, with no dependency:

    read_head(reader)         the start line and headers of a request or a response
    iter_body(reader, head)   its body as the pieces that arrive (Content-Length or chunked;
                              a response with neither runs to the end of the connection)
    chunk(data)               one piece of a chunked body (b"" is the terminating chunk)

Keep-alive is the caller's: a message read to its end leaves the connection at the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

#: Longest head (start line and headers) read; a longer one is a broken peer, not a request.
MAX_HEAD_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The peer sent something that is not HTTP/1.1 as these helpers read it."""


@dataclass(frozen=True, slots=True)
class Head:
    """A message's start line, split on spaces, and its headers (names lower-cased)."""

    start: tuple[str, ...]
    headers: dict[str, str]
    raw: bytes  # as received, for the bytes a proxy counts and forwards

    @property
    def status(self) -> int:
        """A response's status code."""
        return int(self.start[1])

    @property
    def is_chunked(self) -> bool:
        return "chunked" in self.headers.get("transfer-encoding", "").lower()

    @property
    def keeps_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next message's head, or None at a clean end of the connection (between messages)."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as err:
        if not err.partial:
            return None
        raise ProtocolError("connection closed inside a head") from None
    except asyncio.LimitOverrunError:
        raise ProtocolError("head too long") from None
    lines = raw[:-4].decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line {line!r}")
        headers[name.strip().lower()] = value.strip()
    return Head(tuple(lines[0].split(" ", 2)), headers, raw)


async def iter_body(
    reader: asyncio.StreamReader, head: Head, *, is_response: bool = False
) -> AsyncIterator[bytes]:
    """The body of the message `head` opened, piece by piece as it arrives."""
    if head.is_chunked:
        async for piece in _chunked(reader):
            yield piece
        return
    length = head.headers.get("content-length")
    if length is not None:
        left = int(length)
        while left:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise ProtocolError("connection closed inside a body")
            left -= len(piece)
            yield piece
        return
    if is_response and head.status not in (204, 304):  # no length: the body runs to EOF
        while piece := await reader.read(65536):
            yield piece


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the end
                pass
            return
        piece = await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("chunk not followed by CRLF")
        yield piece


async def read_body(reader: asyncio.StreamReader, head: Head) -> bytes:
    """A request's whole body."""
    return b"".join([piece async for piece in iter_body(reader, head)])


def chunk(data: bytes) -> bytes:
    """`data` as one chunk of a chunked body; empty data is the last chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)
