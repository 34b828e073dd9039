"""A packet capture of one loopback TCP port, for the tests that a TLS deployment's transfer
port carries no plaintext (any backend: the capture sits below every process).

An `AF_PACKET` socket on `lo` sees every segment the kernel moves over loopback, so the
test needs no relay in the path and no change to the deployment's addresses. It needs
CAP_NET_RAW (root, as the project's CI runs); without it the test skips.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from serve_helpers import make_certificate

from prfaas.serve.config.deployment import TlsSpec
from prfaas.serve.launch.launcher import Launcher
from prfaas.transfer.wire import MAGIC, PROTOCOL_VERSION, FrameKind

ETH_P_ALL = 0x0003
ETHERNET_HEADER_BYTES = 14  # `lo` frames carry a zeroed Ethernet header
IPPROTO_TCP = 6
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
CAPTURE_BUFFER_BYTES = 256 * 2**20
HELLO = MAGIC + bytes([PROTOCOL_VERSION, FrameKind.HELLO])  # the first frame's first bytes
TLS_HOSTNAME = "kv.prfaas.test"
DATA = MAGIC + bytes([PROTOCOL_VERSION, FrameKind.DATA])  # every KV slice's frame


def tcp_payload_to(frame: bytes, port: int) -> bytes:
    """The TCP payload of an IPv4 `lo` frame whose destination port is `port`, else b""."""
    ip = frame[ETHERNET_HEADER_BYTES:]
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != IPPROTO_TCP:
        return b""
    ip_header = (ip[0] & 0x0F) * 4
    total = struct.unpack("!H", ip[2:4])[0]
    tcp = ip[ip_header:total]
    if len(tcp) < 20 or struct.unpack("!H", tcp[2:4])[0] != port:
        return b""
    return tcp[(tcp[12] >> 4) * 4 :]


@contextmanager
def loopback_capture(port: int) -> Iterator[bytearray]:
    """Every TCP payload byte sent to `port` over loopback while the block runs (segments
    in the order the kernel saw them; a byte may appear twice, once per direction of `lo`)."""
    try:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError:
        pytest.skip("capturing loopback packets needs CAP_NET_RAW (root)")
    # room for every segment of a transfer even while this thread waits for a CPU (a full
    # buffer drops frames); root may set it past net.core.rmem_max
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, CAPTURE_BUFFER_BYTES)
    sock.bind(("lo", 0))
    sock.settimeout(0.2)
    seen = bytearray()
    stop = threading.Event()

    def pump() -> None:
        deadline = None  # once stopped: what the socket still holds, for up to 0.5 s
        while deadline is None or time.monotonic() < deadline:
            if deadline is None and stop.is_set():
                deadline = time.monotonic() + 0.5
            try:
                frame = sock.recv(65536 + ETHERNET_HEADER_BYTES)
            except TimeoutError:
                if stop.is_set():
                    return
                continue
            seen.extend(tcp_payload_to(frame, port))

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        sock.close()


def plaintext_found(captured: bytes, request_id: str) -> tuple[bool, bool, bool]:
    """What a reader of the capture recognises: the HELLO frame, a KV slice's frame header,
    and the request id that every slice's header names."""
    return HELLO in captured, DATA in captured, request_id.encode() in captured


def check_the_transfer_port(launcher: Launcher, model: str, prompt: str, timeout_s: float) -> None:
    """Send one PrfaaS-path completion while capturing the decode instance's transfer port
    (`pdd-0`): the HELLO frame, KV frame headers and the request id are readable on the wire
    exactly when the deployment has no `tls:`."""
    encrypted = launcher.deployment.tls is not None
    decode = launcher.deployment.instance("pdd-0")
    body = {"model": model, "prompt": prompt, "max_tokens": 2, "temperature": 0}
    with loopback_capture(decode.transfer_port) as seen:
        response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=timeout_s)
    captured = bytes(seen)
    assert response.status_code == 200, response.text
    extra = response.json()["prfaas"]
    assert extra["path"] == "prfaas" and extra["kv_bytes"] > 0
    request_id = response.json()["id"].removeprefix("cmpl-")
    assert len(captured) > extra["kv_bytes"] // 2, "the capture missed the transfer"
    assert plaintext_found(captured, request_id) == (not encrypted,) * 3


def tls_files(where: Path) -> TlsSpec:
    """A deployment's `tls:` with a fresh self-signed certificate as its own CA."""
    cert, key = make_certificate(where, TLS_HOSTNAME)
    return TlsSpec(
        cert_file=str(cert), key_file=str(key), ca_file=str(cert), server_hostname=TLS_HOSTNAME
    )
