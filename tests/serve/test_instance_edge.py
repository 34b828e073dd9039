"""An instance's HTTP edge has the router's limits (issue 26), against a live emulated
deployment with raw sockets: a body that is unsigned or declared too large is refused before
a byte of it is sent, slow headers and partial bodies are closed.

The instances' timeouts are 1 s here; a connection must be closed within CLOSED_WITHIN_S, a
liveness bound ten times that, not a speed assertion.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve.config.deployment import InstanceEdgeSpec, InstanceSpec
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

TIMEOUT_S = 1.0
CLOSED_WITHIN_S = 10 * TIMEOUT_S
MAX_BODY_BYTES = 1_000_000
NUM_SLOW = 10  # of each kind


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    edge = InstanceEdgeSpec(
        max_body_bytes=MAX_BODY_BYTES, header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S
    )
    with running(emulated_deployment(instance_edge=edge)) as launcher:
        yield launcher


def _instance(launcher: Launcher) -> InstanceSpec:
    return launcher.deployment.instance("pdd-0")


def _connect(spec: InstanceSpec) -> socket.socket:
    sock = socket.create_connection((spec.host, spec.http_port))
    sock.settimeout(CLOSED_WITHIN_S)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the instance sends until it closes the connection (a socket timeout, the
    liveness bound, fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _head(launcher: Launcher, path: str, body: bytes, *, signed: bool, length: int) -> bytes:
    """A POST's request line and headers declaring `length` body bytes; signed for pdd-0
    over `body` as the router signs (its `httpx.Auth`) when `signed`."""
    spec = _instance(launcher)
    headers = {"Content-Type": "application/json"}
    if signed:
        request = httpx.Request("POST", spec.url + path, content=body)
        signed_request = next(launcher.instance_auth().sync_auth_flow(request))
        headers |= {k: v for k, v in signed_request.headers.items() if k.startswith("x-prfaas")}
    headers["Content-Length"] = str(length)
    lines = [f"POST {path} HTTP/1.1", f"Host: {spec.host}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _tokenize_body() -> bytes:
    return json.dumps({"text": "a body that never comes whole"}).encode()


@pytest.mark.parametrize(
    ("signed", "status"), [(True, b"413"), (False, b"401")], ids=["signed", "unsigned"]
)
def test_a_huge_declared_body_is_answered_before_it_is_sent(
    launcher: Launcher, signed: bool, status: bytes
) -> None:
    """Content-Length 10^12: answered (413, or 401 when unsigned) and closed while not one
    byte of the body was sent."""
    sock = _connect(_instance(launcher))
    sock.sendall(_head(launcher, "/tokenize", _tokenize_body(), signed=signed, length=10**12))
    answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 " + status)
    assert b"application/json" in answer


def test_unsigned_bodies_are_refused_before_they_are_sent(launcher: Launcher) -> None:
    """Four unsigned 60 MiB /prefill bodies (issue 26: +347 MiB held by the instance): each
    is refused with 401 on its headers alone, so none is ever buffered; the instance still
    serves signed calls."""
    for _ in range(4):
        sock = _connect(_instance(launcher))
        sock.sendall(_head(launcher, "/prefill", b"", signed=False, length=60 * 2**20))
        answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 401")
        assert b'"authentication_error"' in answer
    info = httpx.get(_instance(launcher).url + "/info", auth=launcher.instance_auth(), timeout=30)
    assert info.status_code == 200


def test_slow_headers_and_partial_bodies_are_closed(launcher: Launcher) -> None:
    """Connections that never finish their headers are closed; signed calls that never
    finish their body get 408 and are closed; a signed call is served meanwhile."""
    spec = _instance(launcher)
    slow_headers = [_connect(spec) for _ in range(NUM_SLOW)]
    for sock in slow_headers:
        sock.sendall(b"POST /prefill HTTP/1.1\r\nHost: x\r\nContent-")
    partial_bodies = [_connect(spec) for _ in range(NUM_SLOW)]
    body = _tokenize_body()
    for sock in partial_bodies:
        sock.sendall(_head(launcher, "/tokenize", body, signed=True, length=len(body)) + body[:5])
    info = httpx.get(spec.url + "/info", auth=launcher.instance_auth(), timeout=30)
    assert info.status_code == 200
    for sock in slow_headers:
        assert _read_all(sock) == b""  # closed, nothing to answer
    for sock in partial_bodies:
        answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b'"invalid_request_error"' in answer


def test_health_is_the_one_unsigned_call(launcher: Launcher) -> None:
    """The kubelet and load balancers cannot sign: `GET /health` answers them, and nothing
    else does (the same path with another method, or another path, is still refused)."""
    base = f"http://{_instance(launcher).host}:{_instance(launcher).http_port}"
    health = httpx.get(base + "/health", timeout=10.0)
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert httpx.post(base + "/health", json={}, timeout=10.0).status_code == 401
    assert httpx.get(base + "/info", timeout=10.0).status_code == 401
