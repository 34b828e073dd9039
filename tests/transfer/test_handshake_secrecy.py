"""What a peer without the shared secret learns from the handshake (protocol v4): nothing about
the deployment. A stranger dialling a receiver gets a nonce and a MAC; an impostor receiver
that a sender dials gets a session id and a nonce, then a REJECT, never the identity."""

from __future__ import annotations

import asyncio

import pytest
from transfer_helpers import CONFIG, IDENTITY, run, running_pair

from prfaas.transfer import PeerAddress, RequestId, Sender, TcpTransport
from prfaas.transfer.errors import AuthenticationError
from prfaas.transfer.keys import SessionId
from prfaas.transfer.wire import (
    MAC_BYTES,
    NONCE_BYTES,
    PREFIX,
    Challenge,
    FrameKind,
    Hello,
    decode_prefix,
    encode_header,
)

#: Every byte string that would tell a stranger which model, blocks and seed the peer runs.
FACTS = (
    IDENTITY.model_fingerprint,
    IDENTITY.model_fingerprint[:8],
    IDENTITY.hash_seed.to_bytes(8, "big"),
)


async def _read_frame(reader: asyncio.StreamReader) -> tuple[FrameKind, bytes]:
    raw = await reader.readexactly(PREFIX.size)
    prefix = decode_prefix(raw)
    return FrameKind(prefix.kind), await reader.readexactly(prefix.meta_len)


def test_a_stranger_dialling_a_receiver_learns_no_identity() -> None:
    async def scenario() -> None:
        async with running_pair(TcpTransport()) as pair:
            reader, writer = await asyncio.open_connection(pair.address.host, pair.address.port)
            hello = Hello(SessionId(b"x" * 16), 0, b"n" * NONCE_BYTES).encode()
            writer.write(encode_header(FrameKind.HELLO, hello))
            kind, meta = await _read_frame(reader)
            assert kind is FrameKind.CHALLENGE
            assert len(meta) == NONCE_BYTES + MAC_BYTES  # a nonce and a MAC, nothing else
            Challenge.decode(meta)
            assert not any(fact in meta for fact in FACTS)
            writer.close()

    run(scenario())


def test_a_sender_tells_an_impostor_receiver_nothing_and_refuses_it() -> None:
    """The impostor answers HELLO with a CHALLENGE it cannot sign: the sender sends REJECT
    (authentication), never AUTH (which carries the identity)."""
    received: list[tuple[FrameKind, bytes]] = []

    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            received.append(await _read_frame(reader))
            bogus = Challenge(b"c" * NONCE_BYTES, b"m" * MAC_BYTES).encode()
            writer.write(encode_header(FrameKind.CHALLENGE, bogus))
            while True:
                received.append(await _read_frame(reader))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(impostor, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sender = Sender(CONFIG, IDENTITY, TcpTransport())
        try:
            with pytest.raises(AuthenticationError):
                await sender.start_transfer(PeerAddress("127.0.0.1", port), RequestId("r"))
        finally:
            await sender.close()
            server.close()
        await asyncio.sleep(0.1)  # let the impostor read what was sent before the close

    run(scenario())
    kinds = [kind for kind, _ in received]
    assert FrameKind.HELLO in kinds and FrameKind.AUTH not in kinds
    assert set(kinds) <= {FrameKind.HELLO, FrameKind.REJECT}
    assert not any(fact in meta for _, meta in received for fact in FACTS)
