"""Fixtures of the bench tests: a fake OpenAI endpoint and a closed port on loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from bench_fake_server import FakeServer


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    with FakeServer() as server:
        yield server


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
