"""Link telemetry the scheduler consumes (paper section 3: congestion monitoring).

Two sources, both per peer:
- application level: bytes acknowledged by the receiver per second (achieved egress, i.e. what
  actually reached the decode pool), bytes waiting to be sent (backlog) and bytes in flight;
- kernel level: `TCP_INFO` of each connection (smoothed RTT, retransmitted segments, the
  kernel's delivery-rate estimate), read with getsockopt and unpacked from Linux's
  `struct tcp_info`. Fields the running kernel does not report are None, and on a non-Linux
  or non-TCP stream the whole record is None: telemetry degrades, it never fails a transfer.

`RateMeter` and `TokenBucket` take `now_s` as an argument (pure logic; the sender passes the
event loop's monotonic clock), which keeps them testable without sleeping.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from dataclasses import dataclass

# Offsets into Linux's struct tcp_info (include/uapi/linux/tcp.h), stable since 2017 (4.13+).
_TCPI_RTT = struct.Struct("=II")  # tcpi_rtt, tcpi_rttvar (usec) at offset 68
_TCPI_TOTAL_RETRANS = struct.Struct("=I")  # offset 100
_TCPI_BYTES_ACKED = struct.Struct("=Q")  # offset 120
_TCPI_MIN_RTT = struct.Struct("=I")  # offset 148
_TCPI_DELIVERY_RATE = struct.Struct("=Q")  # offset 160, bytes/s
TCP_INFO_BYTES = 232


@dataclass(frozen=True, slots=True)
class TcpInfo:
    """The subset of `struct tcp_info` the scheduler cares about; None = not reported."""

    rtt_s: float | None
    rtt_var_s: float | None
    min_rtt_s: float | None
    total_retransmits: int | None
    bytes_acked: int | None
    delivery_rate_bytes_per_s: float | None


def parse_tcp_info(raw: bytes) -> TcpInfo:
    """Unpack whatever prefix of struct tcp_info the kernel returned."""

    def field(fmt: struct.Struct, offset: int) -> tuple[int, ...] | None:
        if len(raw) < offset + fmt.size:
            return None
        return fmt.unpack_from(raw, offset)

    rtt = field(_TCPI_RTT, 68)
    retrans = field(_TCPI_TOTAL_RETRANS, 100)
    acked = field(_TCPI_BYTES_ACKED, 120)
    min_rtt = field(_TCPI_MIN_RTT, 148)
    rate = field(_TCPI_DELIVERY_RATE, 160)
    return TcpInfo(
        rtt_s=rtt[0] / 1e6 if rtt else None,
        rtt_var_s=rtt[1] / 1e6 if rtt else None,
        min_rtt_s=min_rtt[0] / 1e6 if min_rtt else None,
        total_retransmits=retrans[0] if retrans else None,
        bytes_acked=acked[0] if acked else None,
        delivery_rate_bytes_per_s=float(rate[0]) if rate else None,
    )


def read_tcp_info(sock: socket.socket) -> TcpInfo | None:
    """TCP_INFO of a socket, or None where the platform or socket cannot say."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None or sock.type != socket.SOCK_STREAM or sock.family == socket.AF_UNIX:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, option, TCP_INFO_BYTES)
    except OSError:
        return None
    return parse_tcp_info(raw)


@dataclass(frozen=True, slots=True)
class LinkSignals:
    """One peer link as the scheduler sees it (docs/architecture.md: the scheduler's view).

    `egress_bytes_per_s` is measured from receiver acknowledgements over the last telemetry
    window, so it is goodput into the decode pool, not bytes pushed into socket buffers. Kernel
    fields aggregate over the peer's connections: RTTs are means, retransmissions and delivery rates
    are sums. A silent fall onto a slow path (a transfer that still works, at a fraction of the
    rate) shows up here.
    """

    peer: str
    measured_at_s: float
    num_connections: int
    egress_bytes_per_s: float
    bytes_waiting: int
    bytes_in_flight: int
    bytes_acked_total: int
    rtt_s: float | None
    min_rtt_s: float | None
    retransmitted_segments: int | None
    kernel_delivery_rate_bytes_per_s: float | None


def aggregate_tcp_info(
    infos: list[TcpInfo],
) -> tuple[float | None, float | None, int | None, float | None]:
    """(mean rtt, min of min_rtt, summed retransmits, summed delivery rate) over connections."""
    rtts = [i.rtt_s for i in infos if i.rtt_s is not None]
    mins = [i.min_rtt_s for i in infos if i.min_rtt_s is not None]
    retrans = [i.total_retransmits for i in infos if i.total_retransmits is not None]
    rates = [i.delivery_rate_bytes_per_s for i in infos if i.delivery_rate_bytes_per_s is not None]
    return (
        sum(rtts) / len(rtts) if rtts else None,
        min(mins) if mins else None,
        sum(retrans) if retrans else None,
        sum(rates) if rates else None,
    )


class RateMeter:
    """Bytes per second over a sliding window of `window_s`, from cumulative byte counts."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()
        self.total_bytes = 0

    def add(self, nbytes: int, now_s: float) -> None:
        self.total_bytes += nbytes
        self._samples.append((now_s, self.total_bytes))
        self._trim(now_s)

    def rate_bytes_per_s(self, now_s: float) -> float:
        """Rate over the window ending now; 0 before two samples span any time."""
        self._trim(now_s)
        if not self._samples:
            return 0.0
        start_s, start_bytes = self._samples[0]
        span_s = now_s - start_s
        if span_s <= 0:
            return 0.0
        return (self.total_bytes - start_bytes) / span_s

    def _trim(self, now_s: float) -> None:
        # Keep one sample at or before the window start so the window is always covered.
        while len(self._samples) > 1 and self._samples[1][0] <= now_s - self._window_s:
            self._samples.popleft()


class TokenBucket:
    """Per-peer rate limit for emulation: `rate_bytes_per_s`, bursts up to `burst_bytes`."""

    def __init__(self, rate_bytes_per_s: float, burst_bytes: int, now_s: float) -> None:
        self._rate = rate_bytes_per_s
        self._burst = float(burst_bytes)
        self._tokens = float(burst_bytes)
        self._updated_s = now_s

    def delay_s(self, nbytes: int, now_s: float) -> float:
        """Take `nbytes`; return how long to wait before sending them (0 when in budget).

        Tokens may go negative: the caller sleeps the debt off, which keeps the long-run rate
        exact even for frames larger than the burst.
        """
        elapsed = max(now_s - self._updated_s, 0.0)
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._updated_s = now_s
        self._tokens -= nbytes
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate
