"""Frame layout: exact offsets, metadata round trips, and header corruption detection."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.transfer import AbortReason, FrameError, RejectReason, RequestId, SliceKey, SliceMeta
from prfaas.transfer.keys import SessionId
from prfaas.transfer.wire import (
    PREFIX,
    Abort,
    Auth,
    Challenge,
    DataHeader,
    FrameKind,
    Hello,
    PeerIdentity,
    Reject,
    RequestMark,
    decode_prefix,
    encode_header,
    set_payload_check,
    verify_header,
)

IDENTITY = PeerIdentity(b"\x01" * 32, 16, 99)


def test_prefix_layout_matches_the_spec() -> None:
    raw = encode_header(FrameKind.DATA, b"meta", payload_len=1000, payload_check=0xDEADBEEF)
    assert PREFIX.size == 24
    assert raw[0:2] == b"PF"
    assert raw[2] == 5 and raw[3] == FrameKind.DATA
    assert int.from_bytes(raw[4:8], "big") == 4
    assert int.from_bytes(raw[8:16], "big") == 1000
    assert int.from_bytes(raw[16:20], "big") == 0xDEADBEEF
    assert int.from_bytes(raw[20:24], "big") == zlib.crc32(raw[:20] + b"meta")
    assert raw[24:] == b"meta"


def test_a_payload_check_filled_in_later_seals_the_same_header() -> None:
    later = bytearray(encode_header(FrameKind.DATA, b"meta", payload_len=1000))
    set_payload_check(later, 0xDEADBEEF)
    assert bytes(later) == encode_header(FrameKind.DATA, b"meta", 1000, 0xDEADBEEF)


@pytest.mark.parametrize(
    "message",
    [
        Hello(SessionId(b"s" * 16), 3, b"n" * 32),
        Challenge(b"n" * 32, b"m" * 32),
        Auth(IDENTITY, True, b"m" * 32),
        Auth(IDENTITY, False, b"m" * 32),
        Reject(RejectReason.BLOCK_SIZE, "block size 32 != 16 tokens"),
        RequestMark(RequestId("req-7"), 12, 1 << 40),
        Abort(RequestId("req-7"), AbortReason.STALLED, "no progress"),
    ],
)
def test_control_metadata_round_trips(message: object) -> None:
    assert type(message).decode(message.encode()) == message  # type: ignore[attr-defined]


@given(
    request_id=st.text(min_size=1, max_size=40),
    seq=st.integers(0, 2**32 - 1),
    key=st.builds(
        SliceKey,
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**16 - 1),
        st.integers(0, 2**40),
        st.just(2**40 + 5),
    ),
    shape=st.lists(st.integers(0, 2**40), max_size=6).map(tuple),
    nbytes=st.integers(0, 2**50),
    offset=st.integers(0, 2**50),
)
def test_data_header_round_trips(
    *, request_id: str, seq: int, key: SliceKey, shape: tuple[int, ...], nbytes: int, offset: int
) -> None:
    header = DataHeader(
        RequestId(request_id), seq, SliceMeta(key, "bfloat16", shape, nbytes), offset
    )
    assert DataHeader.decode(header.encode()) == header


@given(position=st.integers(0, 24 + 11 - 1), bit=st.integers(0, 7))
def test_any_flipped_header_bit_is_detected(position: int, bit: int) -> None:
    meta = RequestMark(RequestId("r"), 1, 2).encode()
    raw = bytearray(encode_header(FrameKind.END, meta))
    raw[position] ^= 1 << bit
    with pytest.raises(FrameError):
        prefix = decode_prefix(bytes(raw[:24]))
        body = bytes(raw[24 : 24 + prefix.meta_len])
        verify_header(bytes(raw[:24]), prefix, body)
        if len(body) != len(meta):
            raise FrameError("length changed")


def test_truncated_or_padded_metadata_is_a_frame_error() -> None:
    meta = RequestMark(RequestId("r"), 1, 2).encode()
    with pytest.raises(FrameError):
        RequestMark.decode(meta[:-1])
    with pytest.raises(FrameError):
        RequestMark.decode(meta + b"\0")
    with pytest.raises(FrameError):
        Abort.decode(Abort(RequestId("r"), AbortReason.STALLED, "x").encode()[:3] + b"\x63")


def test_unknown_kind_and_bad_magic_are_frame_errors() -> None:
    raw = bytearray(encode_header(FrameKind.ACK, b""))
    raw[3] = 200
    with pytest.raises(FrameError, match="unknown frame kind"):
        decode_prefix(bytes(raw[:24]))
    with pytest.raises(FrameError, match="magic"):
        decode_prefix(b"GET / HTTP/1.1\r\nHost: x\r\n"[:24])


def test_unknown_handshake_flags_are_a_frame_error() -> None:
    meta = bytearray(Auth(IDENTITY, True, b"m" * 32).encode())
    flags_at = len(meta) - 32 - 1  # the flags byte sits right before the MAC
    assert meta[flags_at] == 0x01
    meta[flags_at] = 0x03
    with pytest.raises(FrameError, match="unknown handshake flags"):
        Auth.decode(bytes(meta))


def test_hello_and_challenge_carry_no_deployment_facts() -> None:
    """Before either side proved the secret, only random bytes and ids cross (v4)."""
    hello = Hello(SessionId(b"s" * 16), 0, b"n" * 32).encode()
    challenge = Challenge(b"c" * 32, b"m" * 32).encode()
    assert len(hello) == 16 + 2 + 32 and len(challenge) == 32 + 32
    facts = (IDENTITY.model_fingerprint, (99).to_bytes(8, "big"), (16).to_bytes(4, "big"))
    assert not any(fact in hello or fact in challenge for fact in facts)
