"""Optional TLS under the HMAC handshake: a transfer over a TLS-wrapped TCP connection."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from transfer_helpers import CONFIG, LOOPS, run, running_pair

from prfaas.transfer import RequestId, SliceKey, TcpTransport, TlsConfig


@pytest.fixture
def tls(tmp_path: Path) -> TlsConfig:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=decode.test", "-addext", "subjectAltName=DNS:decode.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return TlsConfig(str(cert), str(key), str(cert), "decode.test")


@pytest.mark.parametrize("loop", LOOPS)
def test_transfer_over_tls_round_trips(tls: TlsConfig, loop: str) -> None:
    """On either event loop (uvloop's TLS transport is not an `asyncio.Transport` subclass)."""
    config = replace(CONFIG, tls=tls)

    async def scenario() -> None:
        async with running_pair(TcpTransport(tls), config=config) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("tls"))
            blob = bytes(range(256)) * 2000
            await transfer.send_slice(SliceKey(0, 0, 0, 16), "uint8", (len(blob),), blob)
            await transfer.finish()
            assert pair.sink.committed(RequestId("tls"))[SliceKey(0, 0, 0, 16)][1] == blob

    run(scenario(), loop=loop)
