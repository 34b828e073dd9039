"""The PROMPT frame (protocol v5): a request's prompt ids cross the transfer link once, beside
its KV, and the receiver hands them over with the commit (`TransferReceived.prompt_token_ids`).

Checked here: the payload's byte form round-trips (hypothesis), a broken PROMPT (corrupt header
or payload, truncated metadata, not whole uint32s, too long, sent twice) is refused and frees
what its request held, and a v4 peer, which knows no PROMPT frame, is refused at its HELLO
with the version as the reason.
"""

from __future__ import annotations

import asyncio
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transfer_helpers import (
    FaultyTransport,
    collect,
    make_transport,
    run,
    running_pair,
    wait_until,
)

from prfaas.transfer import (
    AbortReason,
    ConnectionLostError,
    FrameError,
    PeerRefused,
    RejectReason,
    RequestId,
    SliceKey,
    TransferAborted,
    TransferAbortedError,
    TransferReceived,
)
from prfaas.transfer.framing import FramedConnection
from prfaas.transfer.keys import SessionId
from prfaas.transfer.wire import (
    MAGIC,
    MAX_PROMPT_TOKENS,
    PREFIX,
    FrameKind,
    Hello,
    Reject,
    RequestMark,
    decode_prefix,
    decode_prompt,
    encode_header,
    encode_prompt,
    verify_header,
)

KINDS = ["memory", "tcp"]
UINT32 = st.integers(min_value=0, max_value=2**32 - 1)
BLOB = bytes(range(256)) * 64


@given(st.lists(UINT32, max_size=2000))
def test_prompt_payload_round_trips(token_ids: list[int]) -> None:
    payload = encode_prompt(token_ids)
    assert len(payload) == 4 * len(token_ids)
    assert payload[:4] == (token_ids[0].to_bytes(4, "little") if token_ids else b"")
    assert decode_prompt(payload) == tuple(token_ids)


@given(st.lists(UINT32, min_size=1, max_size=50), st.integers(min_value=1, max_value=3))
def test_a_payload_that_is_not_whole_uint32s_is_a_frame_error(
    token_ids: list[int], cut: int
) -> None:
    with pytest.raises(FrameError, match="not whole uint32s"):
        decode_prompt(encode_prompt(token_ids)[:-cut])


def test_ids_outside_uint32_and_overlong_prompts_are_not_encoded() -> None:
    with pytest.raises(ValueError, match="uint32"):
        encode_prompt([2**32])
    with pytest.raises(ValueError, match="exceeds"):
        encode_prompt(range(MAX_PROMPT_TOKENS + 1))


@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=0, max_value=2**40))
def test_prompt_metadata_round_trips(seq: int, nbytes: int) -> None:
    mark = RequestMark(RequestId("cmpl-1"), seq, nbytes)
    raw = encode_header(FrameKind.PROMPT, mark.encode(), payload_len=nbytes)
    prefix = decode_prefix(raw[: PREFIX.size])
    verify_header(raw[: PREFIX.size], prefix, raw[PREFIX.size :])
    assert prefix.kind is FrameKind.PROMPT and prefix.version == 5
    assert RequestMark.decode(raw[PREFIX.size :]) == mark


@given(st.data())
def test_a_flipped_bit_in_a_prompt_header_or_truncated_metadata_is_refused(
    data: st.DataObject,
) -> None:
    meta = RequestMark(RequestId("cmpl-1"), 0, 400).encode()
    raw = bytearray(encode_header(FrameKind.PROMPT, meta, payload_len=400))
    position = data.draw(st.integers(min_value=2, max_value=len(raw) - 1))
    raw[position] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    with pytest.raises(FrameError):
        prefix = decode_prefix(bytes(raw[: PREFIX.size]))
        verify_header(bytes(raw[: PREFIX.size]), prefix, bytes(raw[PREFIX.size :]))
    with pytest.raises(FrameError, match="truncated"):
        RequestMark.decode(meta[: data.draw(st.integers(min_value=0, max_value=len(meta) - 1))])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_slices", [0, 3])
def test_the_prompt_arrives_with_the_commit(kind: str, num_slices: int) -> None:
    """Also with no slice at all: a decode side that holds the whole prefix still learns
    the whole prompt."""
    prompt = list(range(100_000, 130_000))  # 120 KB: two of the test config's frames

    async def scenario() -> None:
        async with running_pair(make_transport(kind)) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("r"))
            await transfer.send_prompt(prompt)
            for layer in range(num_slices):
                await transfer.send_slice(SliceKey(layer, 0, 0, 16), "uint8", (len(BLOB),), BLOB)
            await transfer.finish()
            (received,) = await collect(pair.receiver, 1)
            assert isinstance(received, TransferReceived)
            assert received.prompt_token_ids == tuple(prompt)
            assert received.num_slices == num_slices
            assert received.payload_bytes == 4 * len(prompt) + num_slices * len(BLOB)

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_transfer_without_a_prompt_commits_without_one(kind: str) -> None:
    async def scenario() -> None:
        async with running_pair(make_transport(kind)) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("move"))
            await transfer.send_slice(SliceKey(0, 0, 0, 16), "uint8", (len(BLOB),), BLOB)
            await transfer.finish()
            (received,) = await collect(pair.receiver, 1)
            assert isinstance(received, TransferReceived)
            assert received.prompt_token_ids is None

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_corrupt_prompt_payload_aborts_its_request_and_frees_its_pages(kind: str) -> None:
    async def scenario() -> None:
        inner = make_transport(kind)
        faulty = FaultyTransport(inner)
        async with running_pair(inner, sender_transport=faulty) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("bad"))
            await transfer.send_slice(SliceKey(0, 0, 0, 16), "uint8", (len(BLOB),), BLOB)
            faulty.corrupt_part = "payload"  # the next frame with a payload: the PROMPT
            await transfer.send_prompt([1, 2, 3, 4])
            with pytest.raises(TransferAbortedError) as info:
                await transfer.finish()
            assert info.value.reason is AbortReason.CHECKSUM_MISMATCH
            (aborted,) = await collect(pair.receiver, 1)
            assert isinstance(aborted, TransferAborted)
            assert aborted.reason is AbortReason.CHECKSUM_MISMATCH
            assert pair.sink.num_free_pages == pair.sink.num_pages

    run(scenario())


def test_a_prompt_is_sent_once_and_before_the_end() -> None:
    async def scenario() -> None:
        async with running_pair(make_transport("memory")) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("r"))
            await transfer.send_prompt([1])
            with pytest.raises(ValueError, match="twice"):
                await transfer.send_prompt([1])
            await transfer.finish()
            with pytest.raises(ValueError, match="after finish"):
                await transfer.send_prompt([1])

    run(scenario())


def _frame_of_version(version: int, kind: FrameKind, meta: bytes) -> bytes:
    """A frame as a peer speaking protocol `version` would write it (header re-sealed)."""
    head = PREFIX.pack(MAGIC, version, kind, len(meta), 0, 0, 0)[:20]
    return head + zlib.crc32(meta, zlib.crc32(head)).to_bytes(4, "big") + meta


def test_a_v4_peer_is_refused_at_its_hello_with_the_version_as_the_reason() -> None:
    """A v4 sender never gets to send KV it would frame without the PROMPT frame; it reads a
    REJECT that names the version, and the receiver reports the refusal."""

    async def scenario() -> None:
        transport = make_transport("tcp")
        async with running_pair(transport) as pair:
            raw = await transport.connect(pair.address)
            hello = Hello(SessionId(b"s" * 16), 0, b"n" * 32)
            await raw.write([_frame_of_version(4, FrameKind.HELLO, hello.encode())])
            answer = await FramedConnection(raw).read_frame()
            assert answer.kind is FrameKind.REJECT
            reject = Reject.decode(answer.meta)
            assert reject.reason is RejectReason.VERSION and "v4" in reject.message
            (refused,) = await collect(pair.receiver, 1)
            assert isinstance(refused, PeerRefused) and refused.reason is RejectReason.VERSION
            raw.close()

    run(scenario())


def test_a_prompt_over_the_limit_drops_the_session_before_its_bytes_are_read() -> None:
    """The receiver reads none of what a broken peer claims (nothing is allocated for it):
    the session is dropped as for any frame that breaks the protocol."""
    nbytes = MAX_PROMPT_TOKENS * 4 + 4

    async def scenario() -> None:
        async with running_pair(make_transport("memory")) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("big"))
            await transfer.send_slice(SliceKey(0, 0, 0, 16), "uint8", (len(BLOB),), BLOB)
            await wait_until(lambda: transfer.acked_bytes == len(BLOB))
            (link,) = pair.sender._links.values()
            mark = RequestMark(RequestId("big"), 0, nbytes).encode()
            raw = link._connections[0]._connection  # a header that promises what never comes
            await raw.write([encode_header(FrameKind.PROMPT, mark, nbytes)])
            with pytest.raises(ConnectionLostError):
                await asyncio.wait_for(transfer.finish(), 5.0)
            (aborted,) = await collect(pair.receiver, 1)
            assert isinstance(aborted, TransferAborted)
            assert aborted.reason is AbortReason.PROTOCOL_VIOLATION
            assert "exceeds" in aborted.message
            assert pair.sink.num_free_pages == pair.sink.num_pages

    run(scenario())
