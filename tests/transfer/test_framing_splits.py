"""Framing round trips when the byte stream is cut at arbitrary places (hypothesis)."""

from __future__ import annotations

import asyncio
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from transfer_helpers import run

from prfaas.transfer import RequestId, SliceKey, SliceMeta
from prfaas.transfer.framing import FramedConnection, payload_checksum
from prfaas.transfer.memory import MemoryConnection, _Pipe
from prfaas.transfer.wire import DataHeader, FrameKind, RequestMark, encode_header

frames_strategy = st.lists(
    st.one_of(
        st.binary(min_size=0, max_size=3000).map(lambda p: ("data", p)),
        st.integers(0, 1000).map(lambda n: ("end", n)),
    ),
    min_size=1,
    max_size=8,
)


def _encode(frames: list[tuple[str, object]]) -> bytes:
    out = b""
    for i, (kind, value) in enumerate(frames):
        if kind == "data":
            assert isinstance(value, bytes)
            meta = SliceMeta(SliceKey(i, 0, 0, 1), "uint8", (len(value),), len(value))
            header = DataHeader(RequestId("r"), i, meta, 0).encode()
            out += encode_header(
                FrameKind.DATA, header, len(value), payload_checksum([memoryview(value)])
            )
            out += value
        else:
            assert isinstance(value, int)
            out += encode_header(FrameKind.END, RequestMark(RequestId("r"), value, 0).encode())
    return out


@settings(max_examples=60, deadline=None)
@given(frames=frames_strategy, cuts=st.lists(st.integers(0, 30000), max_size=20))
def test_frames_survive_arbitrary_chunking(
    frames: list[tuple[str, object]], cuts: list[int]
) -> None:
    stream = _encode(frames)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})

    async def scenario() -> list[tuple[str, object]]:
        pipe = _Pipe(capacity_bytes=1 << 30)
        for start, end in itertools.pairwise(bounds):
            await pipe.write(stream[start:end])
        pipe.close()
        conn = FramedConnection(MemoryConnection("test", inbound=pipe, outbound=_Pipe(1)))
        decoded: list[tuple[str, object]] = []
        for _ in frames:
            frame = await conn.read_frame()
            if frame.kind is FrameKind.DATA:
                payload = bytearray(frame.prefix.payload_len)
                views = [memoryview(payload)]
                assert await conn.read_payload_into(frame, views)
                assert payload_checksum(views) == frame.prefix.payload_check
                decoded.append(("data", bytes(payload)))
            else:
                decoded.append(("end", RequestMark.decode(frame.meta).count))
        return decoded

    assert run(asyncio.wait_for(scenario(), 5)) == frames
