"""KV transfer goodput vs physical limits and peers, side by side in one run.

Prints JSON: (1) loopback goodput of prfaas.transfer for 1-256 MiB requests over 1-8 TCP
connections, next to iperf3 (raw TCP, the limit) and Mooncake Transfer Engine over TCP (when a
Python with `mooncake-transfer-engine-non-cuda` is given); (2) goodput through tbf-shaped
links with 20 ms of RTT (user-space delay line), 1 vs several connections, next to iperf3
through the same link and the shaped rate. The receiver always runs in its own process.

    .venv/bin/python benchmarks/transfer_bench.py [--mooncake-python /tmp/mc-venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from prfaas.transfer import (
    ArraySink,
    PeerAddress,
    Receiver,
    RequestId,
    Sender,
    SliceKey,
    TcpTransport,
    TransferConfig,
    TransferReceived,
)
from prfaas.transfer.linkemu import (
    EmulatedLink,
    LinkSpec,
    emulated_link,
    socket_in_netns,
    unavailable_reason,
)
from prfaas.transfer.transport import SocketFactory
from prfaas.transfer.wire import PeerIdentity

MIB = 2**20
SECRET = b"benchmark-secret-not-for-production"
IDENTITY = PeerIdentity(b"\x07" * 32, 16, 0)
LAYER_BYTES = 8 * MIB


def _config(connections: int) -> TransferConfig:
    return TransferConfig(secret=SECRET, num_connections=connections)


# -- receiver process ----------------------------------------------------------------------
async def _receive(host: str) -> None:
    sink = ArraySink(1024 * MIB, 2 * MIB)
    receiver = Receiver(_config(1), IDENTITY, TcpTransport(), sink)
    address = await receiver.start(PeerAddress(host, 0))
    print(address.port, flush=True)
    stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    while not stdin_closed.done():
        waiter = asyncio.ensure_future(receiver.wait_for_events())
        await asyncio.wait([waiter, stdin_closed], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        for event in receiver.take_events():
            if isinstance(event, TransferReceived):
                sink.release(event.request_id)
    await receiver.close()


def _start_receiver(host: str, netns: str | None = None) -> tuple[subprocess.Popen[str], int]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    cmd = [*prefix, sys.executable, __file__, "--role", "receiver", "--host", host]
    process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=10)


# -- prfaas sender -------------------------------------------------------------------------
async def _send_requests(sender: Sender, address: PeerAddress, sizes: list[int], tag: str) -> None:
    payload = memoryview(bytes(LAYER_BYTES))

    async def one(index: int, size: int) -> None:
        transfer = await sender.start_transfer(address, RequestId(f"{tag}-{index}"))
        for layer, offset in enumerate(range(0, size, LAYER_BYTES)):
            chunk = payload[: min(LAYER_BYTES, size - offset)]
            await transfer.send_slice(SliceKey(layer, 0, 0, 1), "uint8", (len(chunk),), chunk)
        await transfer.finish()

    await asyncio.gather(*(one(i, s) for i, s in enumerate(sizes)))


async def _goodput(
    address: PeerAddress, connections: int, sizes: list[int], reps: int, netns: str | None = None
) -> float:
    """Median goodput in Gbit/s of sending `sizes` (concurrently) `reps` times on a warm link."""
    factory: SocketFactory | None = None
    if netns is not None:
        factory = functools.partial(socket_in_netns, netns)
    sender = Sender(_config(connections), IDENTITY, TcpTransport(socket_factory=factory))
    await _send_requests(sender, address, [MIB], "warmup")
    rates = []
    for rep in range(reps):
        start = time.perf_counter()
        await _send_requests(sender, address, sizes, f"r{rep}")
        rates.append(sum(sizes) * 8 / (time.perf_counter() - start) / 1e9)
    await sender.close()
    return round(statistics.median(rates), 3)


# -- peers ---------------------------------------------------------------------------------
def _iperf3(host: str, streams: int, netns_server: str | None = None,
            netns_client: str | None = None, seconds: float = 3.0) -> float | None:  # fmt: skip
    if shutil.which("iperf3") is None:
        return None
    port = "5299"
    srv = ["ip", "netns", "exec", netns_server] if netns_server else []
    cli = ["ip", "netns", "exec", netns_client] if netns_client else []
    server = subprocess.Popen([*srv, "iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out = subprocess.run(
            [*cli, "iperf3", "-c", host, "-p", port, "-P", str(streams), "-t", str(seconds), "-J"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
    finally:
        server.wait(timeout=10)
    bits = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    return round(bits / 1e9, 3)


MOONCAKE_PEER = """
import json, sys, time
import numpy as np
from mooncake.engine import TransferEngine
role, size = sys.argv[1], int(sys.argv[2])
engine = TransferEngine()
assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
buf = np.ones(size, dtype=np.uint8)
assert engine.register_memory(buf.ctypes.data, size) == 0
if role == "target":
    print(json.dumps([engine.get_rpc_port(), buf.ctypes.data]), flush=True)
    sys.stdin.read()
else:
    port, remote, reps = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        assert engine.transfer_sync_write(f"127.0.0.1:{port}", buf.ctypes.data, remote, size) == 0
        times.append(time.perf_counter() - start)
    print(json.dumps(times[1:]))
"""


def _mooncake(python: str | None, size: int, reps: int) -> dict[str, object]:
    if python is None or not Path(python).exists():
        return {"status": "not run: pass --mooncake-python with mooncake-transfer-engine-non-cuda"}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(MOONCAKE_PEER)
    target = subprocess.Popen(
        [python, f.name, "target", str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert target.stdout is not None
        port, remote = json.loads(target.stdout.readline())
        out = subprocess.run(
            [python, f.name, "init", str(size), str(port), str(remote), str(reps)],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        seconds = json.loads(out.stdout.strip().splitlines()[-1])
        return {"status": "ok", "gbps": round(size * 8 / statistics.median(seconds) / 1e9, 3)}
    except (subprocess.SubprocessError, ValueError, AssertionError) as exc:
        return {"status": f"failed: {exc!r}"}
    finally:
        _stop(target)
        os.unlink(f.name)


# -- scenarios -----------------------------------------------------------------------------
def loopback(mooncake_python: str | None) -> dict[str, object]:
    process, port = _start_receiver("127.0.0.1")
    address = PeerAddress("127.0.0.1", port)
    ours: dict[str, float] = {}
    try:
        for size_mib in (1, 16, 64, 256):
            for connections in (1, 4, 8):
                reps = 5 if size_mib < 64 else 3
                rate = asyncio.run(_goodput(address, connections, [size_mib * MIB], reps))
                ours[f"{size_mib}MiB x{connections}conn"] = rate
    finally:
        _stop(process)
    iperf = {f"{n}stream": _iperf3("127.0.0.1", n) for n in (1, 4, 8)}
    mooncake = {f"{s}MiB": _mooncake(mooncake_python, s * MIB, 3) for s in (64, 256)}
    return {"prfaas_gbps": ours, "iperf3_gbps": iperf, "mooncake_te_tcp": mooncake}


def shaped(rates_bits_per_s: list[float], one_way_delay_s: float) -> dict[str, object]:
    results: dict[str, object] = {}
    for rate in rates_bits_per_s:
        spec = LinkSpec(rate_bits_per_s=rate, one_way_delay_s=one_way_delay_s)
        with emulated_link(spec) as link:
            results[f"{rate / 1e9:g}Gbit"] = _shaped_one(link, rate)
    return results


def _shaped_one(link: EmulatedLink, rate: float) -> dict[str, object]:
    total = int(rate / 8 * 3.0)
    sizes = [min(64 * MIB, total - o) for o in range(0, total, 64 * MIB)]
    process, port = _start_receiver(link.receiver_ip, link.receiver_netns)
    ours = {}
    try:
        for connections in (1, 4):
            gbps = asyncio.run(
                _goodput(link.receiver_address(port), connections, sizes, 1, link.sender_netns)
            )
            ours[f"{connections}conn"] = {"gbps": gbps, "of_shaped": round(gbps * 1e9 / rate, 3)}
    finally:
        _stop(process)
    iperf = {
        f"{n}stream": _iperf3(link.receiver_ip, n, link.receiver_netns, link.sender_netns)
        for n in (1, 4)
    }
    return {"shaped_gbps": rate / 1e9, "prfaas": ours, "iperf3_gbps": iperf}


def _git_sha() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="bench", choices=["bench", "receiver"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--mooncake-python", default=None)
    parser.add_argument("--shaped-gbit", default="0.1,1,5")
    args = parser.parse_args()
    if args.role == "receiver":
        asyncio.run(_receive(args.host))
        return
    rates = [float(r) * 1e9 for r in args.shaped_gbit.split(",") if r]
    delay = LinkSpec(rate_bits_per_s=1e9, one_way_delay_s=0.01)
    reason = unavailable_reason(delay)
    report = {
        "benchmark": "transfer_bench",
        "git_sha": _git_sha(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "loopback": loopback(args.mooncake_python),
        "shaped_20ms_rtt": shaped(rates, 0.01) if reason is None else {"skipped": reason},
        "pyzmq": "not run: pyzmq is not a project dependency (ask before adding it)",
        "layer_overlap": "not run: needs the engine package (issue: real engine prefill)",
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
