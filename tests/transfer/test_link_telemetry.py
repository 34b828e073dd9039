"""Telemetry pieces: TCP_INFO unpacking, the rate meter and the token bucket (pure logic)."""

from __future__ import annotations

import socket
import struct

import pytest

from prfaas.transfer.telemetry import (
    TCP_INFO_BYTES,
    RateMeter,
    TcpInfo,
    TokenBucket,
    aggregate_tcp_info,
    parse_tcp_info,
    read_tcp_info,
)


def _raw_tcp_info() -> bytes:
    raw = bytearray(TCP_INFO_BYTES)
    struct.pack_into("=II", raw, 68, 20_500, 1_250)  # rtt, rttvar in usec
    struct.pack_into("=I", raw, 100, 17)  # total_retrans
    struct.pack_into("=Q", raw, 120, 123_456_789)  # bytes_acked
    struct.pack_into("=I", raw, 148, 20_000)  # min_rtt
    struct.pack_into("=Q", raw, 160, 12_500_000)  # delivery_rate
    return bytes(raw)


def test_tcp_info_fields_come_from_the_linux_offsets() -> None:
    assert parse_tcp_info(_raw_tcp_info()) == TcpInfo(
        rtt_s=0.0205,
        rtt_var_s=0.00125,
        min_rtt_s=0.02,
        total_retransmits=17,
        bytes_acked=123_456_789,
        delivery_rate_bytes_per_s=12_500_000.0,
    )


def test_an_old_kernel_short_struct_degrades_to_none_fields() -> None:
    info = parse_tcp_info(_raw_tcp_info()[:104])
    assert info.rtt_s == 0.0205 and info.total_retransmits == 17
    assert info.bytes_acked is None and info.min_rtt_s is None
    assert info.delivery_rate_bytes_per_s is None


def test_non_tcp_sockets_have_no_tcp_info() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert read_tcp_info(udp) is None


def test_aggregation_over_connections() -> None:
    a = parse_tcp_info(_raw_tcp_info())
    b = TcpInfo(0.0305, None, 0.01, 3, None, 2_500_000.0)
    assert aggregate_tcp_info([a, b]) == (pytest.approx(0.0255), 0.01, 20, 15_000_000.0)
    assert aggregate_tcp_info([]) == (None, None, None, None)


def test_rate_meter_measures_over_its_window() -> None:
    meter = RateMeter(window_s=1.0)
    assert meter.rate_bytes_per_s(0.0) == 0.0
    for i in range(1, 31):
        meter.add(1000, now_s=i * 0.1)  # 10,000 bytes/s for 3 s
    assert meter.rate_bytes_per_s(3.0) == pytest.approx(10_000)
    assert meter.total_bytes == 30_000
    assert meter.rate_bytes_per_s(10.0) == 0.0  # idle link decays to zero


def test_token_bucket_allows_a_burst_then_paces() -> None:
    bucket = TokenBucket(rate_bytes_per_s=1000, burst_bytes=500, now_s=0.0)
    assert bucket.delay_s(500, now_s=0.0) == 0.0
    assert bucket.delay_s(250, now_s=0.0) == pytest.approx(0.25)
    # after sleeping off the debt and 0.5 s more, 500 bytes of budget are back (capped)
    assert bucket.delay_s(500, now_s=10.0) == 0.0
    waits = [bucket.delay_s(100, now_s=10.0) for _ in range(10)]
    assert waits[-1] == pytest.approx(1.0)  # 1,000 bytes beyond the bucket at 1,000 B/s
