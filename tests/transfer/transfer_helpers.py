"""Shared pieces of the transfer tests: a tiny hybrid model, synthetic caches, a harness that
runs a sender and a receiver over a given transport, and a fault-injecting transport."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import numpy as np
import pytest

from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    LinearKind,
    MlaAttention,
    ModelSpec,
    SlidingWindowAttention,
)
from prfaas.transfer import (
    ArraySink,
    Connection,
    MemoryTransport,
    PeerAddress,
    Receiver,
    ReceiverEvent,
    Sender,
    SliceKey,
    TcpTransport,
    TransferConfig,
    Transport,
    identity_for,
)
from prfaas.transfer.transport import BeforeSend, Buffer, ConnectionHandler, Digest, Listener

T = TypeVar("T")

SECRET = b"correct horse battery staple 42!"
CONFIG = TransferConfig(
    secret=SECRET,
    num_connections=3,
    max_frame_bytes=64 * 1024,
    max_bytes_in_flight=512 * 1024,
    rate_burst_bytes=64 * 1024,
    stall_timeout_s=5.0,
    handshake_timeout_s=5.0,
)
TEST_TIMEOUT_S = 20.0

TINY_HYBRID = ModelSpec(
    name="tiny-hybrid",
    hidden_size=64,
    vocab_size=128,
    mixers=(
        GqaAttention(num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=16),
        MlaAttention(
            num_layers=1,
            num_q_heads=4,
            kv_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=16,
            v_head_dim=16,
        ),
        SlidingWindowAttention(
            num_layers=1, window_tokens=64, num_q_heads=4, num_kv_heads=2, head_dim=16
        ),
        LinearAttention(
            num_layers=2,
            kind=LinearKind.GATED_DELTANET,
            num_heads=4,
            num_key_heads=2,
            key_head_dim=16,
            value_head_dim=16,
            conv_kernel=4,
        ),
    ),
    mlps=(DenseMlp(num_layers=6, intermediate_size=128),),
)
IDENTITY = identity_for(TINY_HYBRID, block_size_tokens=16, hash_seed=1234)


@dataclass(frozen=True)
class Slice:
    key: SliceKey
    array: np.ndarray[Any, Any]

    @property
    def dtype(self) -> str:
        return str(self.array.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.array.shape)


def synthetic_cache(
    spec: ModelSpec, cached_tokens: int, total_tokens: int, seed: int = 0
) -> list[Slice]:
    """Every layer's slices for the uncached tail [cached, total) plus the final states.

    GQA: (2, tokens, kv_heads, head_dim) float16; MLA: (tokens, rank + rope) float16; SWA: the
    last min(total, W) tokens' KV; linear: fp32 recurrent state (heads, dk, dv) and the conv
    window (kernel - 1, channels) float16. Layers are numbered across groups in order.
    """
    rng = np.random.default_rng(seed)
    tail = total_tokens - cached_tokens
    slices: list[Slice] = []
    layer = 0
    for group, mixer in enumerate(spec.mixers):
        for _ in range(mixer.num_layers):
            if isinstance(mixer, GqaAttention):
                shape = (2, tail, mixer.num_kv_heads, mixer.head_dim)
                key = SliceKey(layer, group, cached_tokens, total_tokens)
                slices.append(Slice(key, rng.standard_normal(shape).astype(np.float16)))
            elif isinstance(mixer, MlaAttention):
                shape = (tail, mixer.kv_lora_rank + mixer.qk_rope_head_dim)
                key = SliceKey(layer, group, cached_tokens, total_tokens)
                slices.append(Slice(key, rng.standard_normal(shape).astype(np.float16)))
            elif isinstance(mixer, SlidingWindowAttention):
                window = min(total_tokens, mixer.window_tokens)
                shape = (2, window, mixer.num_kv_heads, mixer.head_dim)
                key = SliceKey(layer, group, total_tokens, total_tokens)
                slices.append(Slice(key, rng.standard_normal(shape).astype(np.float16)))
            else:
                state = (mixer.num_heads, mixer.key_head_dim, mixer.value_head_dim)
                key = SliceKey(layer, group, total_tokens, total_tokens)
                slices.append(Slice(key, rng.standard_normal(state).astype(np.float32)))
                conv = (mixer.conv_kernel - 1, mixer.conv_channels)
                conv_key = SliceKey(layer, group + len(spec.mixers), total_tokens, total_tokens)
                slices.append(Slice(conv_key, rng.standard_normal(conv).astype(np.float16)))
            layer += 1
    return slices


#: The event loops the serving processes may run (uvicorn takes uvloop when it is installed).
LOOPS = ["asyncio", "uvloop"]


def run(
    coro: Coroutine[Any, Any, T], timeout_s: float = TEST_TIMEOUT_S, loop: str = "asyncio"
) -> T:
    """Run a test coroutine with a hard time bound, so no test can hang, on `loop`
    (skipped where uvloop is not installed)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout_s)

    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            coro.close()  # never started: no "never awaited" warning
            pytest.skip("uvloop is not installed")
        return cast(T, uvloop.run(bounded()))
    return asyncio.run(bounded())


def make_transport(kind: str) -> Transport:
    return MemoryTransport() if kind == "memory" else TcpTransport()


@dataclass
class Pair:
    sender: Sender
    receiver: Receiver
    sink: ArraySink
    address: PeerAddress


@contextlib.asynccontextmanager
async def running_pair(
    transport: Transport,
    *,
    config: TransferConfig = CONFIG,
    sender_config: TransferConfig | None = None,
    sender_transport: Transport | None = None,
    sink_bytes: int = 16 * 1024 * 1024,
    page_bytes: int = 4096,
) -> AsyncIterator[Pair]:
    sink = ArraySink(sink_bytes, page_bytes)
    receiver = Receiver(config, IDENTITY, transport, sink)
    address = await receiver.start(PeerAddress("127.0.0.1", 0))
    sender = Sender(sender_config or config, IDENTITY, sender_transport or transport)
    try:
        yield Pair(sender, receiver, sink, address)
    finally:
        await sender.close()
        await receiver.close()


async def collect(receiver: Receiver, count: int) -> list[ReceiverEvent]:
    """Wait for `count` receiver events (the caller's `run` bounds the time)."""
    events: list[ReceiverEvent] = []
    while len(events) < count:
        await receiver.wait_for_events()
        events.extend(receiver.take_events())
    return events


async def wait_until(predicate: Any, poll_s: float = 0.005) -> None:
    while not predicate():
        await asyncio.sleep(poll_s)


class FaultyConnection:
    """Wraps a connection; can flip one byte of the next DATA frame's header or payload, or
    stop the next DATA frame halfway through its payload until a gate opens."""

    def __init__(self, inner: Connection, faults: FaultyTransport) -> None:
        self._inner = inner
        self._faults = faults

    @property
    def peer_name(self) -> str:
        return self._inner.peer_name

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        if before_send is not None:  # checks are computed first: the faults are on the wire
            before_send()
        target = self._faults.corrupt_part
        if target is not None and len(parts) == 2:  # a DATA frame: [header, payload]
            self._faults.corrupt_part = None
            index = 0 if target == "header" else 1
            flipped = bytearray(parts[index])
            flipped[len(flipped) // 2] ^= 0xFF
            parts = [flipped, parts[1]] if index == 0 else [parts[0], flipped]
        gate = self._faults.stall_next_payload
        if gate is not None and len(parts) == 2:
            self._faults.stall_next_payload = None
            half = len(parts[1]) // 2
            await self._inner.write([parts[0], parts[1][:half]])
            self._faults.stalled.set()
            await gate.wait()
            parts = [parts[1][half:]]
        await self._inner.write(parts)

    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        await self._inner.read_into(view, digest)

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        for view in views:
            await self.read_into(view, digest)

    def tcp_info(self) -> None:
        return None

    def close(self) -> None:
        self._inner.close()

    def abort(self) -> None:
        self._inner.abort()


class FaultyTransport:
    """A transport wrapper for the sender side of fault tests."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.corrupt_part: str | None = None
        self.stall_next_payload: asyncio.Event | None = None
        self.stalled = asyncio.Event()
        self.connections: list[FaultyConnection] = []

    async def connect(self, address: PeerAddress) -> Connection:
        conn = FaultyConnection(await self._inner.connect(address), self)
        self.connections.append(conn)
        return conn

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        return await self._inner.listen(address, handler)

    def cut_all(self) -> None:
        for conn in self.connections:
            conn.abort()


def with_secret(config: TransferConfig, secret: bytes) -> TransferConfig:
    return replace(config, secret=secret)
