"""KV transfer goodput vs physical limits and peers, side by side in one run.

Prints JSON: (1) loopback goodput of prfaas.transfer for 1-256 MiB requests over 1, 4 and 8
TCP connections, each stream count measured back to back with `iperf3 -P n` (raw TCP, the
limit) and the sweep repeated `--rounds` times, plus Mooncake Transfer Engine over TCP (when a
Python with `mooncake-transfer-engine-non-cuda` is given) and the acceptance ratios; (2)
goodput through tbf-shaped links with 20 ms of RTT (delay on the return path, see
`linkemu._return_path_delayed`), 1 vs 4 connections, next to iperf3 through the same link and
the shaped rate. The receiver always runs in its own process. About 90 s.

    .venv/bin/python benchmarks/transfer_bench.py [--mooncake-python /tmp/mc-venv/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

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
CONNECTIONS = (1, 4, 8)
SIZES_MIB = (1, 16, 64, 256)
# Frames are striped over connections: on a slow link a 4 MiB frame holds one connection for
# a long time (100 Mbit/s / 4 connections: 1.3 s), and the connections finishing early idle
# through the tail of a transfer. 1 MiB frames keep the stripes even.
SHAPED_FRAME_BYTES = MIB


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
    address: PeerAddress,
    connections: int,
    sizes: list[int],
    reps: int,
    *,
    netns: str | None = None,
    warmup_bytes: int = MIB,
    frame_bytes: int = 4 * MIB,
) -> float:
    """Median goodput in Gbit/s of sending `sizes` (concurrently) `reps` times on a link warmed
    by `warmup_bytes` (handshakes done; on shaped links, congestion windows open)."""
    factory: SocketFactory | None = None
    if netns is not None:
        factory = functools.partial(socket_in_netns, netns)
    config = replace(_config(connections), max_frame_bytes=frame_bytes)
    sender = Sender(config, IDENTITY, TcpTransport(socket_factory=factory))
    await _send_requests(sender, address, [warmup_bytes], "warmup")
    rates = []
    for rep in range(reps):
        start = time.perf_counter()
        await _send_requests(sender, address, sizes, f"r{rep}")
        rates.append(sum(sizes) * 8 / (time.perf_counter() - start) / 1e9)
    await sender.close()
    return round(statistics.median(rates), 3)


# -- peers ---------------------------------------------------------------------------------
def _iperf3(host: str, streams: int, *, netns_server: str | None = None,
            netns_client: str | None = None, seconds: float = 3.0,
            omit_s: int = 0) -> float | None:  # fmt: skip
    """Received Gbit/s of `iperf3 -P streams`; `omit_s` seconds of ramp-up are not counted."""
    if shutil.which("iperf3") is None:
        return None
    port = "5299"
    srv = ["ip", "netns", "exec", netns_server] if netns_server else []
    cli = ["ip", "netns", "exec", netns_client] if netns_client else []
    server = subprocess.Popen([*srv, "iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out = subprocess.run(
            [*cli, "iperf3", "-c", host, "-p", port, "-P", str(streams), "-t", str(seconds),
             "-O", str(omit_s), "-J"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
    finally:
        server.wait(timeout=10)
    bits = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
    return round(float(bits) / 1e9, 3)


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
def loopback(mooncake_python: str | None, rounds: int) -> dict[str, object]:
    """Ours next to iperf3 at the same number of TCP streams, measured back to back and the
    whole comparison repeated `rounds` times: on a shared host the load shifts within seconds."""
    process, port = _start_receiver("127.0.0.1")
    address = PeerAddress("127.0.0.1", port)
    ours: dict[str, list[float]] = {}
    iperf: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for connections in CONNECTIONS:
                rate = _iperf3("127.0.0.1", connections, seconds=2.0)
                if rate is not None:
                    iperf.setdefault(f"{connections}stream", []).append(rate)
                for size_mib in SIZES_MIB:
                    reps = 5 if size_mib < 64 else 3
                    rate = asyncio.run(_goodput(address, connections, [size_mib * MIB], reps))
                    ours.setdefault(f"{size_mib}MiB x{connections}conn", []).append(rate)
    finally:
        _stop(process)
    mooncake = {f"{s}MiB": _mooncake(mooncake_python, s * MIB, 3) for s in (64, 256)}
    return {
        "prfaas_gbps": _spread(ours),
        "iperf3_gbps": _spread(iperf) if iperf else "not run: iperf3 is not installed",
        "mooncake_te_tcp": mooncake,
        "ratios_64MiB_plus": _ratios(ours, iperf, mooncake),
    }


def _spread(runs: dict[str, list[float]]) -> dict[str, dict[str, object]]:
    return {key: {"best": max(values), "runs": values} for key, values in runs.items()}


def _ratios(
    ours: dict[str, list[float]], iperf: dict[str, list[float]], mooncake: dict[str, Any]
) -> dict[str, object]:
    """The acceptance ratios: best of ours over best of the peer, same size and stream count."""
    out: dict[str, object] = {}
    for size_mib in (s for s in SIZES_MIB if s >= 64):
        for connections in CONNECTIONS:
            mine = max(ours[f"{size_mib}MiB x{connections}conn"])
            limit = iperf.get(f"{connections}stream")
            if limit:
                key = f"{size_mib}MiB x{connections}conn / iperf3 -P {connections}"
                out[key] = round(mine / max(limit), 3)
        best = max(max(ours[f"{size_mib}MiB x{c}conn"]) for c in CONNECTIONS)
        if iperf:
            out[f"{size_mib}MiB best / iperf3 best"] = round(
                best / max(max(v) for v in iperf.values()), 3
            )
        peer = mooncake.get(f"{size_mib}MiB", {})
        if peer.get("status") == "ok":
            out[f"{size_mib}MiB best / Mooncake TE"] = round(best / peer["gbps"], 3)
    return out


def shaped(rates_bits_per_s: list[float], one_way_delay_s: float) -> dict[str, object]:
    results: dict[str, object] = {}
    for rate in rates_bits_per_s:
        # The data path stays in the kernel (see linkemu._return_path_delayed): the Python
        # delay line forwarding every data packet would be the bottleneck above ~1 Gbit/s.
        spec = LinkSpec(rate, one_way_delay_s=one_way_delay_s, delay_return_path_only=True)
        with emulated_link(spec) as link:
            results[f"{rate / 1e9:g}Gbit"] = _shaped_one(link, rate)
    return results


def _shaped_one(link: EmulatedLink, rate: float) -> dict[str, object]:
    """Steady state on a persistent link, for us and iperf3 alike: we send 0.5 s of traffic
    before timing 3 s of it (the hosts keep congestion windows across idle gaps, see
    `linkemu.HOST_SYSCTLS`); iperf3 omits its first second."""
    total = int(rate / 8 * 3.0)
    warmup = int(rate / 8 * 0.5)
    sizes = [min(64 * MIB, total - o) for o in range(0, total, 64 * MIB)]
    process, port = _start_receiver(link.receiver_ip, link.receiver_netns)
    ours = {}
    try:
        for connections in (1, 4):
            address = link.receiver_address(port)
            run = _goodput(address, connections, sizes, 1, netns=link.sender_netns,
                           warmup_bytes=warmup, frame_bytes=SHAPED_FRAME_BYTES)  # fmt: skip
            gbps = asyncio.run(run)
            ours[f"{connections}conn"] = {"gbps": gbps, "of_shaped": round(gbps * 1e9 / rate, 3)}
    finally:
        _stop(process)
    iperf = {
        f"{n}stream": _iperf3(
            link.receiver_ip,
            n,
            netns_server=link.receiver_netns,
            netns_client=link.sender_netns,
            omit_s=1,
        )
        for n in (1, 4)
    }
    peer = iperf if shutil.which("iperf3") else "not run: iperf3 is not installed"
    return {"shaped_gbps": rate / 1e9, "prfaas": ours, "iperf3_gbps": peer}


def _git_sha() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="bench", choices=["bench", "receiver"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--mooncake-python",
        default=sys.executable if importlib.util.find_spec("mooncake") else None,
        help="a Python with mooncake-transfer-engine-non-cuda (default: this one, if it has it)",
    )
    parser.add_argument("--shaped-gbit", default="0.1,1,5")
    parser.add_argument("--rounds", type=int, default=2, help="loopback comparison repeats")
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
        "load_average_before": os.getloadavg(),
        "loopback": loopback(args.mooncake_python, args.rounds),
        "shaped_20ms_rtt": shaped(rates, 0.01) if reason is None else {"skipped": reason},
        "pyzmq": "not run: pyzmq is not a project dependency (ask before adding it)",
        "layer_overlap": "not run: needs the engine package (issue: real engine prefill)",
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
