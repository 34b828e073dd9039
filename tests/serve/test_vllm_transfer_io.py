"""The vLLM connector's transfer side (`integrations.vllm.transfer_io`), without vLLM.

Its sender and receiver run on one event-loop thread each, driven from vLLM's model-runner
thread; these tests drive them the same way, from the test's thread, over loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve_helpers import make_certificate, recording_relay

from prfaas.integrations.vllm.settings import ConnectorSettings
from prfaas.integrations.vllm.transfer_io import IoSettings, TransferIO
from prfaas.serve.backends.vllm.child import connector_config
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    InstanceRole,
    InstanceSpec,
    LinkSpec,
    free_port,
)
from prfaas.transfer import PeerAddress, PeerIdentity, SliceKey, TlsConfig
from prfaas.transfer.shipping import RATE_BURST_BYTES, Pacing, ShippingPlan
from prfaas.transfer.wire import MAGIC, PROTOCOL_VERSION, FrameKind

SECRET = b"transfer-io-test-secret-0123456789"
IDENTITY = PeerIdentity(b"f" * 32, 128, 0)


def _plan(port: int, **fields: Any) -> ShippingPlan:
    return ShippingPlan("127.0.0.1", port, payload_checks=True, sink_bytes=64 * 2**20, **fields)


def _io(port: int, **fields: Any) -> TransferIO:
    return TransferIO(IoSettings(_plan(port, **fields), SECRET), IDENTITY)


def _until(condition: object, what: str) -> None:
    for _ in range(2000):  # bounded: 20 s of 10 ms polls
        if callable(condition) and condition():
            return
        time.sleep(0.01)
    pytest.fail(f"{what} did not happen")


def test_a_burst_of_slices_arrives_whole_and_is_not_done_before_it_is_sent() -> None:
    receiver_port = free_port()
    receiver, sender = _io(receiver_port), _io(free_port())
    try:
        blocks = [np.full(65536, i, dtype=np.uint8) for i in range(26)]
        peer = PeerAddress("127.0.0.1", receiver_port)
        for i, block in enumerate(blocks):
            key = SliceKey(i % 2, 0, i * 128, (i + 1) * 128)
            sender.send_slice("t0", peer, key, dtype="uint8", shape=(65536,), payload=block)
        sender.finish("t0", peer)
        # asked right after queueing: the blocks are still needed (zero-copy sources)
        assert not sender.is_done("t0")
        _until(lambda: sender.is_done("t0"), "the transfer's completion")
        _until(lambda: receiver.poll_arrival("t0") is not None, "the arrival")
        assert receiver.poll_arrival("t0") == (True, "")
        slices = receiver.claim("t0")
        assert len(slices) == 26
        for key, (_, data) in slices.items():
            assert data == blocks[key.token_start // 128].tobytes()
    finally:
        sender.close()
        receiver.close()


def test_a_cache_move_of_a_pd_instance_goes_through_its_link_paced_sender() -> None:
    """A PD instance's transfers to its own decode side are not paced; its cache moves cross
    the inter-cluster link, so they leave through the second sender, paced as the link."""
    receiver_port = free_port()
    receiver = _io(receiver_port)
    sender = _io(free_port(), move=Pacing(1e9))

    async def peers(which: str) -> list[str]:
        return [link.peer for link in getattr(sender.endpoints, which).link_signals()]

    try:
        assert sender.endpoints.move_sender is not sender.endpoints.sender
        peer = PeerAddress("127.0.0.1", receiver_port)
        block = np.zeros(4096, dtype=np.uint8)
        key = SliceKey(0, 0, 0, 128)
        sender.send_slice("move", peer, key, dtype="uint8", shape=(4096,), payload=block,
                          is_move=True)  # fmt: skip
        sender.finish("move", peer, is_move=True)
        _until(lambda: sender.is_done("move"), "the move's completion")
        _until(lambda: receiver.poll_arrival("move") is not None, "the move's arrival")
        assert receiver.poll_arrival("move") == (True, "")
        assert sender.call(lambda: peers("move_sender")) != []
        assert sender.call(lambda: peers("sender")) == []  # the unpaced one never connected
    finally:
        sender.close()
        receiver.close()


def test_its_threads_run_on_every_cpu_though_vllm_pinned_the_process() -> None:
    """vLLM's CPU worker pins its process to its compute cores; the transfer threads must not
    wait for a turn beside its spinning scheduler (docs/vllm.md, CPU placement)."""
    every = sorted(os.sched_getaffinity(0))  # the CPUs this machine lets the tests use
    if len(every) < 2:
        pytest.skip("needs two CPUs to tell a pinned thread from a free one")
    program = (
        "import os, threading\n"
        f"os.sched_setaffinity(0, {{{every[0]}}})\n"
        "from prfaas.integrations.vllm.transfer_io import IoSettings, TransferIO\n"
        "from prfaas.serve.config.deployment import free_port\n"
        "from prfaas.transfer import PeerIdentity\n"
        "from prfaas.transfer.shipping import ShippingPlan\n"
        "plan = ShippingPlan('127.0.0.1', free_port(), True, 2**20)\n"
        f"settings = IoSettings(plan, {SECRET!r})\n"
        "io = TransferIO(settings, PeerIdentity(b'f' * 32, 128, 0))\n"
        "loop = next(t for t in threading.enumerate() if t.name == 'prfaas-transfer')\n"
        "print(sorted(os.sched_getaffinity(loop.native_id)), sorted(os.sched_getaffinity(0)))\n"
        "io.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    # the loop thread free, the caller still pinned
    assert done.stdout.strip() == f"{every} [{every[0]}]"


MARKER = b"prfaas-kv-bytes:"  # a payload a capture would recognise
HELLO = MAGIC + bytes([PROTOCOL_VERSION, FrameKind.HELLO])  # the first frame's first bytes


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "tls"])
def test_a_tls_deployments_kv_crosses_the_wire_encrypted(tmp_path: Path, encrypted: bool) -> None:
    """With the deployment's TLS files in the connector's settings (what the instance shell
    writes into `kv_connector_extra_config`), a capture of the transfer port holds no frame
    header (HELLO included) and no KV byte; without them it holds both, which shows the capture
    sees what crosses."""
    hostname = "kv.prfaas.test"
    cert, key = make_certificate(tmp_path, hostname)
    tls = TlsConfig(str(cert), str(key), str(cert), hostname) if encrypted else None
    receiver_port = free_port()
    receiver = _io(receiver_port, tls=tls)
    sender = _io(free_port(), tls=tls)
    block = np.frombuffer(MARKER * 4096, dtype=np.uint8)
    try:
        with recording_relay(("127.0.0.1", receiver_port)) as (relay_port, seen):
            peer = PeerAddress("127.0.0.1", relay_port)
            key_ = SliceKey(0, 0, 0, 128)
            sender.send_slice("t0", peer, key_, dtype="uint8", shape=block.shape, payload=block)
            sender.finish("t0", peer)
            _until(lambda: receiver.poll_arrival("t0") is not None, "the arrival")
            assert receiver.poll_arrival("t0") == (True, "")
            assert receiver.claim("t0")[key_][1] == block.tobytes()
            captured = bytes(seen)
    finally:
        sender.close()
        receiver.close()
    assert captured, "nothing crossed the relay"
    assert (HELLO in captured, MARKER in captured) == (not encrypted, not encrypted)


LINK = LinkSpec(rate_gbps=0.032, rtt_ms=300.0)  # 4 MB/s, 0.3 s: a transfer of seconds


def _linked_deployment(model_dir: Path) -> Deployment:
    def instance(name: str, role: InstanceRole, cluster: str) -> InstanceSpec:
        return InstanceSpec(
            name=name, role=role, cluster=cluster, backend=Backend.VLLM, transfer_port=free_port()
        )

    return Deployment(
        model=str(model_dir),
        link=LINK,
        instances=(
            instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
            instance("pdd-0", InstanceRole.PD_DECODE, "pd"),
        ),
    )


def _send(io: TransferIO, transfer_id: str, peer: PeerAddress, blocks: list[np.ndarray]) -> float:
    """Seconds from queueing `blocks` to the receiver's commit of all of them."""
    started = time.monotonic()
    for i, block in enumerate(blocks):
        key = SliceKey(0, 0, i * 128, (i + 1) * 128)
        io.send_slice(transfer_id, peer, key, dtype="uint8", shape=block.shape, payload=block)
    io.finish(transfer_id, peer)
    _until(lambda: io.is_done(transfer_id), f"{transfer_id}'s completion")
    return time.monotonic() - started


def test_the_connector_ships_through_the_links_token_bucket_and_rtt(tmp_path: Path) -> None:
    """What the vLLM backend writes into `kv_connector_extra_config` for a PrfaaS instance,
    read back by the connector's settings, builds a sender shaped like the instance shell's:
    every write held for the link's RTT, the rate bounded by the link's token bucket."""
    deployment = _linked_deployment(tmp_path)
    prfaas = deployment.instance("prfaas-0")
    extra = connector_config(deployment, prfaas, tmp_path / "status.json")
    settings = ConnectorSettings.model_validate(json.loads(json.dumps(extra)))
    assert settings.shipping.send == Pacing(LINK.rate_bytes_per_s, LINK.rtt_ms / 1e3)
    decode = deployment.instance("pdd-0")
    pd_extra = connector_config(deployment, decode, tmp_path / "pd.json")
    assert ConnectorSettings.model_validate(pd_extra).shipping.move == settings.shipping.send
    receiver_port = free_port()
    receiver, sender = (
        _io(receiver_port),
        TransferIO(IoSettings(settings.shipping, SECRET), IDENTITY),
    )
    try:
        peer = PeerAddress("127.0.0.1", receiver_port)
        # one small slice: within the bucket's burst, so only the RTT holds it
        assert _send(sender, "small", peer, [np.zeros(1024, dtype=np.uint8)]) >= LINK.rtt_ms / 1e3
        blocks = [np.full(256 * 1024, i, dtype=np.uint8) for i in range(20)]  # 5 MiB
        elapsed_s = _send(sender, "large", peer, blocks)
        paced_bytes = sum(b.nbytes for b in blocks) - RATE_BURST_BYTES
        assert paced_bytes / elapsed_s <= 1.25 * LINK.rate_bytes_per_s
        _until(lambda: receiver.poll_arrival("large") is not None, "the arrival")
        assert len(receiver.claim("large")) == len(blocks)
    finally:
        sender.close()
        receiver.close()
