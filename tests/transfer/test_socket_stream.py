"""Plain TCP's `SocketStream`: small writes leave from the event loop, every write keeps its
order, and the I/O threads survive a socket an event loop made non-blocking (uvloop does)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transfer_helpers import CONFIG, TINY_HYBRID, collect, run, running_pair, synthetic_cache

from prfaas.transfer import PeerAddress, RequestId, TcpTransport, TransferReceived
from prfaas.transfer.socket_stream import DIRECT_WRITE_BYTES, SocketStream
from prfaas.transfer.transport import Connection


@contextlib.asynccontextmanager
async def _pair(
    notsent_lowat_bytes: int | None = None,
) -> AsyncIterator[tuple[SocketStream, SocketStream]]:
    """Two connected streams over loopback, closed on the way out."""
    transport = TcpTransport(notsent_lowat_bytes=notsent_lowat_bytes)
    accepted: asyncio.Queue[Connection] = asyncio.Queue()
    done = asyncio.Event()

    async def handler(conn: Connection) -> None:
        await accepted.put(conn)
        await done.wait()

    listener = await transport.listen(PeerAddress("127.0.0.1", 0), handler)
    client = await transport.connect(listener.address)
    server = await accepted.get()
    assert isinstance(client, SocketStream) and isinstance(server, SocketStream)
    try:
        yield client, server
    finally:
        client.close()
        done.set()
        await listener.close()


def _count_thread_writes(stream: SocketStream) -> list[int]:
    """Record each write handed to `stream`'s writer thread (its size)."""
    sizes: list[int] = []
    submit = stream._writer.submit

    def counted(call: Callable[[], int]) -> asyncio.Future[int]:
        sizes.append(sum(len(v) for v in call.args[0]))  # type: ignore[attr-defined]
        return submit(call)

    stream._writer.submit = counted  # type: ignore[method-assign]
    return sizes


def test_a_small_write_leaves_from_the_event_loop_without_a_thread_hand_off() -> None:
    """An ACK-sized frame is in the peer's socket by the end of the loop turn that wrote it:
    no wake-up of the writer thread (two context switches) per small frame; a large write
    still uses it."""

    async def scenario() -> None:
        async with _pair() as (client, server):
            thread_writes = _count_thread_writes(client)
            await client.write([b"head", b"small payload"])
            await asyncio.sleep(0)  # the end of this loop turn
            peer = server._sock
            assert peer.recv(64, socket.MSG_DONTWAIT) == b"headsmall payload"
            assert thread_writes == []
            big = bytes(DIRECT_WRITE_BYTES)
            writing = asyncio.ensure_future(client.write([big]))
            out = bytearray(len(big))
            await server.read_into(memoryview(out))
            await writing
            assert thread_writes == [len(big)]

    run(scenario())


def test_small_writes_of_one_loop_turn_leave_in_one_send() -> None:
    """The ACKs of every frame read in one turn (and a prefill's due layers) leave in one
    `sendmsg`, not one each; in order, and the next turn's writes after them."""

    async def scenario() -> None:
        async with _pair() as (client, server):
            sends: list[int] = []
            send_ready = client._send_ready

            def counted(views: list[memoryview]) -> int:
                sends.append(len(views))
                return send_ready(views)

            client._send_ready = counted  # type: ignore[method-assign]
            frames = [bytes([i]) * 40 for i in range(10)]
            for frame in frames:
                await client.write([frame[:8], frame[8:]])
            await asyncio.sleep(0)
            await client.write([b"next turn"])
            await asyncio.sleep(0)
            expected = b"".join(frames) + b"next turn"
            out = bytearray(len(expected))
            await server.read_into(memoryview(out))
            assert bytes(out) == expected
            assert sends == [20, 1]

    run(scenario())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.integers(1, 2_000), st.integers(DIRECT_WRITE_BYTES, 3 * DIRECT_WRITE_BYTES)),
        min_size=1,
        max_size=12,
    )
)
def test_small_and_large_writes_arrive_in_the_order_they_were_made(sizes: list[int]) -> None:
    """A small write made while a large one is still on the writer thread must not overtake
    it: the bytes arrive as written, whatever mix of sizes (the link's frames depend on it)."""

    async def scenario() -> None:
        async with _pair(notsent_lowat_bytes=16_384) as (client, server):
            parts = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
            expected = b"".join(parts)
            out = bytearray(len(expected))
            reading = asyncio.ensure_future(server.read_into(memoryview(out)))
            for part in parts:
                await client.write([part])
            await reading
            assert bytes(out) == expected

    run(scenario())


def test_the_io_threads_survive_a_socket_made_non_blocking_behind_their_back() -> None:
    """uvloop (libuv) sets O_NONBLOCK on every fd it watches; the flag is the socket's, so
    the writer thread's `sendmsg` and the reader thread's `recvmsg_into` then meet EAGAIN.
    They wait for readiness and go on: a 10 MB write and read arrive whole."""

    async def scenario() -> None:
        async with _pair(notsent_lowat_bytes=16_384) as (client, server):
            os.set_blocking(client._sock.fileno(), False)
            os.set_blocking(server._sock.fileno(), False)
            data = bytes(range(251)) * 40_000
            writing = asyncio.ensure_future(client.write([b"head", data]))
            await asyncio.sleep(0.05)  # the writer thread fills the socket buffers first
            out = bytearray(4 + len(data))
            await server.read_into(memoryview(out))
            await writing
            assert bytes(out) == b"head" + data

    run(scenario())


def test_a_transfer_over_tcp_completes_under_uvloop() -> None:
    """The whole sender -> receiver path under uvloop (which makes watched sockets
    non-blocking): every slice arrives intact, large ones through the I/O threads, whose
    sends block on a small unsent bound."""
    slices = synthetic_cache(TINY_HYBRID, 0, 20_000, seed=7)

    async def scenario() -> None:
        async with running_pair(TcpTransport(notsent_lowat_bytes=16_384), config=CONFIG) as pair:
            for n in range(3):
                rid = RequestId(f"uv-{n}")
                transfer = await pair.sender.start_transfer(pair.address, rid)
                for s in slices:
                    await transfer.send_slice(s.key, s.dtype, s.shape, s.array)
                await transfer.finish()
                (received,) = await collect(pair.receiver, 1)
                assert isinstance(received, TransferReceived)
                got = pair.sink.committed(rid)
                for s in slices:
                    _, data = got[s.key]
                    assert np.array_equal(np.frombuffer(data, s.array.dtype), s.array.ravel())
                pair.sink.release(rid)

    run(scenario(), loop="uvloop")
