"""The `Transport` contract, run against the TCP and in-memory implementations alike."""

from __future__ import annotations

import asyncio
import itertools
import socket

import pytest
import xxhash
from transfer_helpers import make_transport, run

from prfaas.transfer import Connection, PeerAddress, TcpTransport
from prfaas.transfer.transport import NOTSENT_LOWAT_BYTES, Listener, Transport

KINDS = ["memory", "tcp"]


async def _connected(
    kind: str, transport: Transport | None = None
) -> tuple[Connection, Connection, Listener, asyncio.Event]:
    transport = make_transport(kind) if transport is None else transport
    accepted: asyncio.Queue[Connection] = asyncio.Queue()
    done = asyncio.Event()

    async def handler(conn: Connection) -> None:
        await accepted.put(conn)
        await done.wait()

    listener = await transport.listen(PeerAddress("127.0.0.1", 0), handler)
    client = await transport.connect(listener.address)
    server = await accepted.get()
    return client, server, listener, done


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_arrive_in_order_whatever_the_read_sizes(kind: str) -> None:
    async def scenario() -> None:
        client, server, listener, done = await _connected(kind)
        data = bytes(range(256)) * 4000
        writer = asyncio.ensure_future(client.write([data[:1], data[1:500_000], data[500_000:]]))
        out = bytearray(len(data))
        view, pos = memoryview(out), 0
        for size in (3, 24, 70_000, 1, 300_000):
            await server.read_into(view[pos : pos + size])
            pos += size
        await server.read_into(view[pos:])
        await writer
        assert bytes(out) == data
        client.close()
        done.set()
        await listener.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_digest_sees_every_byte_in_order_and_before_send_runs_before_the_bytes_go(
    kind: str,
) -> None:
    """Reads small, large and scattered (some bytes staged, some read straight into the
    views) feed one running hash; `before_send` fills a part in place before it is sent, for
    small writes and large ones alike."""

    async def scenario() -> None:
        client, server, listener, done = await _connected(kind)
        data = bytes(range(251)) * 2_000
        for body in (b"tiny", data):
            head = bytearray(4)

            def fill(head: bytearray = head) -> None:
                head[:] = b"HEAD"

            writer = asyncio.ensure_future(client.write([head, body], fill))
            out = bytearray(4 + len(body))
            view, digest = memoryview(out), xxhash.xxh3_64()
            for start, end in ((0, 3), (3, 100), (100, 200_000)):
                await server.read_into(view[start:end], digest)
            cuts = (200_000, 200_001, 300_000, len(out))  # a scatter read, one part 1 byte
            await server.readv_into([view[a:b] for a, b in itertools.pairwise(cuts)], digest)
            await writer
            assert bytes(out) == b"HEAD" + body
            assert digest.intdigest() == xxhash.xxh3_64_intdigest(b"HEAD" + body)
        client.close()
        done.set()
        await listener.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_small_scatter_read_takes_what_an_earlier_part_brought_along(kind: str) -> None:
    """One read from the socket may bring the bytes of several small views (and of what
    follows them): each view gets exactly its own, in order."""

    async def scenario() -> None:
        client, server, listener, done = await _connected(kind)
        data = bytes(range(251)) * 40
        await client.write([data, b"next"])
        out = bytearray(len(data))
        view = memoryview(out)
        digest = xxhash.xxh3_64()
        await server.readv_into([view[:3], view[3:5000], view[5000:]], digest)
        tail = bytearray(4)
        await server.read_into(memoryview(tail))
        assert (bytes(out), bytes(tail)) == (data, b"next")
        assert digest.intdigest() == xxhash.xxh3_64_intdigest(data)
        client.close()
        done.set()
        await listener.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_end_of_stream_is_an_incomplete_read(kind: str) -> None:
    async def scenario() -> None:
        client, server, listener, done = await _connected(kind)
        await client.write([b"abc"])
        client.close()
        with pytest.raises(asyncio.IncompleteReadError) as info:
            await server.read_into(memoryview(bytearray(10)))
        assert info.value.partial == b"abc"
        done.set()
        await listener.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_abort_fails_the_peer_and_further_writes(kind: str) -> None:
    async def scenario() -> None:
        client, server, listener, done = await _connected(kind)
        client.abort()
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await server.read_into(memoryview(bytearray(10)))
        await asyncio.sleep(0.01)
        with pytest.raises(ConnectionError):
            for _ in range(100):
                await client.write([b"x" * 65536])
        done.set()
        await listener.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_connecting_to_nothing_is_refused(kind: str) -> None:
    async def scenario() -> None:
        transport = make_transport(kind)
        listener = await transport.listen(PeerAddress("127.0.0.1", 0), lambda c: asyncio.sleep(0))
        address = listener.address
        await listener.close()
        with pytest.raises(ConnectionRefusedError):
            await transport.connect(address)

    run(scenario())


def test_tcp_connections_report_kernel_telemetry_and_memory_ones_do_not() -> None:
    async def scenario() -> None:
        for kind in KINDS:
            client, server, listener, done = await _connected(kind)
            await client.write([b"x" * 100_000])
            await server.read_into(memoryview(bytearray(100_000)))
            info = client.tcp_info()
            if kind == "tcp":
                assert info is not None and info.rtt_s is not None and info.bytes_acked
            else:
                assert info is None
            client.close()
            done.set()
            await listener.close()

    run(scenario())


def _notsent_lowat(conn: Connection) -> int:
    sock = conn._sock  # type: ignore[attr-defined]
    return int(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT))


def test_tcp_sockets_bound_their_unsent_backlog_unless_told_not_to() -> None:
    """Frames wait in the link's shared queue, not in one socket's private backlog."""

    async def scenario() -> None:
        for lowat, expected in ((None, NOTSENT_LOWAT_BYTES), (65_536, 65_536)):
            transport = TcpTransport() if lowat is None else TcpTransport(notsent_lowat_bytes=lowat)
            client, server, listener, done = await _connected("tcp", transport)
            assert _notsent_lowat(client) == _notsent_lowat(server) == expected
            client.close()
            done.set()
            await listener.close()
        client, server, listener, done = await _connected(
            "tcp", TcpTransport(notsent_lowat_bytes=None)
        )
        assert _notsent_lowat(client) == 0  # not set: the sysctl tcp_notsent_lowat applies
        client.close()
        done.set()
        await listener.close()

    run(scenario())


def test_large_writes_through_a_small_unsent_bound_arrive_intact() -> None:
    """A write many times the bound blocks and resumes inside `sendmsg`; nothing is lost."""

    async def scenario() -> None:
        transport = TcpTransport(notsent_lowat_bytes=16_384)
        client, server, listener, done = await _connected("tcp", transport)
        data = bytes(range(251)) * 40_000  # ~10 MB, a prime period
        writer = asyncio.ensure_future(client.write([b"head", data]))
        out = bytearray(4 + len(data))
        view = memoryview(out)
        for start in range(0, len(out), 1_000_003):
            await server.read_into(view[start : start + 1_000_003])
        await writer
        assert bytes(out) == b"head" + data
        client.close()
        done.set()
        await listener.close()

    run(scenario())
