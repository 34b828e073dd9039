"""KV transfer goodput vs physical limits and peers, side by side in one run.

Prints JSON: (1) loopback goodput of prfaas.transfer for 1-256 MiB requests over 1, 4 and 8
TCP connections (64 MiB+ also with payload checks off at both ends), each stream count
measured back to back with `iperf3 -P n` (raw TCP, the limit), a plain pyzmq PUSH/PULL
transfer of the same sizes and Python's raw-socket ceiling (blocking sockets, nothing but the
copies, with and without our XXH3 payload check), the sweep repeated `--rounds` times, plus
Mooncake Transfer Engine over TCP (when a Python with
`mooncake-transfer-engine-non-cuda` is given) and the acceptance ratios; (2) goodput through
tbf-shaped links with 20 ms of RTT (delay on the return path, see
`linkemu._return_path_delayed`), 1 vs 4 connections, next to iperf3 through the same link, the
shaped rate and the payload ceiling (headers: computed from the MTU, and measured from the
sender's tbf byte counters); (3) layer-wise overlap: a real engine prefill (tiny preset, 2K
prompt) streamed layer by layer vs exported whole and then sent, timed from the last layer's
compute to the last byte acknowledged, over loopback and a shaped link. The receiver always
runs in its own process. About 90 s.

    .venv/bin/python benchmarks/transfer_bench.py [--mooncake-python /tmp/mc-venv/bin/python]
        [--only loopback,shaped,overlap]

Part (3) needs the `engine` extra; it imports `prfaas.engine` (never torch itself) inside
`layer_overlap` only, so the rest runs without it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

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
    EmulatedLinkSpec,
    emulated_link,
    socket_in_netns,
    unavailable_reason,
)
from prfaas.transfer.transport import SocketFactory
from prfaas.transfer.wire import PeerIdentity
from provenance import git_sha, host

MIB = 2**20
SECRET = b"benchmark-secret-not-for-production"
IDENTITY = PeerIdentity(b"\x07" * 32, 16, 0)
LAYER_BYTES = 8 * MIB
MAX_REQUEST_BYTES = 256 * MIB
CONNECTIONS = (1, 4, 8)
SIZES_MIB = (1, 16, 64, 256)
# Frames are striped over connections: on a slow link a 4 MiB frame holds one connection for
# a long time (100 Mbit/s / 4 connections: 1.3 s), and the connections finishing early idle
# through the tail of a transfer. 1 MiB frames keep the stripes even.
SHAPED_FRAME_BYTES = MIB
# On loopback the host's two cores are the bottleneck, and each frame costs a few event-loop
# turns and thread wake-ups on both sides: one frame per 8 MiB layer slice halves them against
# the 4 MiB default (docs/benchmarks.md).
LOOPBACK_FRAME_BYTES = 8 * MIB


def _config(connections: int, payload_checks: bool = True) -> TransferConfig:
    return TransferConfig(secret=SECRET, num_connections=connections, payload_checks=payload_checks)


# -- receiver process ----------------------------------------------------------------------
async def _receive(host: str, payload_checks: bool) -> None:
    sink = ArraySink(1024 * MIB, 2 * MIB)
    receiver = Receiver(_config(1, payload_checks), IDENTITY, TcpTransport(), sink)
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


def _start_receiver(
    host: str, netns: str | None = None, payload_checks: bool = True
) -> tuple[subprocess.Popen[str], int]:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    cmd = [*prefix, sys.executable, __file__, "--role", "receiver", "--host", host]
    if not payload_checks:
        cmd.append("--no-payload-checks")
    process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=10)


# -- prfaas sender -------------------------------------------------------------------------
@functools.cache
def _source() -> memoryview:
    """What every sender here sends: random bytes in memory of its own, one region per layer
    of a request, as a prefill's KV is. Not `bytes(n)`: that is calloc'd, every page the one
    shared zero page, so hashing and copying it always hit the cache."""
    return memoryview(np.random.default_rng(0).bytes(MAX_REQUEST_BYTES))


async def _send_requests(sender: Sender, address: PeerAddress, sizes: list[int], tag: str) -> None:
    payload = _source()

    async def one(index: int, size: int) -> None:
        transfer = await sender.start_transfer(address, RequestId(f"{tag}-{index}"))
        for layer, offset in enumerate(range(0, size, LAYER_BYTES)):
            chunk = payload[offset : offset + min(LAYER_BYTES, size - offset)]
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
    payload_checks: bool = True,
    signals: dict[str, object] | None = None,
) -> float:
    """Median goodput in Gbit/s of sending `sizes` (concurrently) `reps` times on a link warmed
    by `warmup_bytes` (handshakes done; on shaped links, congestion windows open)."""
    factory: SocketFactory | None = None
    if netns is not None:
        factory = functools.partial(socket_in_netns, netns)
    config = replace(
        _config(connections, payload_checks),
        max_frame_bytes=frame_bytes,
        rate_burst_bytes=max(frame_bytes, 4 * MIB),
    )
    sender = Sender(config, IDENTITY, TcpTransport(socket_factory=factory))
    await _send_requests(sender, address, [warmup_bytes], "warmup")
    rates = []
    for rep in range(reps):
        start = time.perf_counter()
        await _send_requests(sender, address, sizes, f"r{rep}")
        rates.append(sum(sizes) * 8 / (time.perf_counter() - start) / 1e9)
    if signals is not None:  # the link's telemetry at the end (TCP_INFO over its connections)
        (link,) = sender.link_signals()
        signals["retransmitted_segments"] = link.retransmitted_segments
        signals["rtt_ms"] = None if link.rtt_s is None else round(link.rtt_s * 1e3, 2)
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


ZMQ_RECEIVER = """
import json, sys, zmq
frame = int(sys.argv[1])
ctx = zmq.Context()
data, acks = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
ports = [data.bind_to_random_port("tcp://127.0.0.1"), acks.bind_to_random_port("tcp://127.0.0.1")]
print(json.dumps(ports), flush=True)
buf, total = bytearray(frame), 0
while True:
    n = data.recv_into(buf)
    if n == 1:  # stop
        break
    if n == 0:  # end of one request: acknowledge every byte
        acks.send(str(total).encode())
        total = 0
    total += n
"""


def _pyzmq(sizes_mib: tuple[int, ...], reps: int, frame_bytes: int) -> dict[str, float] | str:
    """Median Gbit/s of one request of each size over plain pyzmq (PUSH/PULL, one TCP
    connection): `frame_bytes` messages sent zero-copy, received with `recv_into` into one
    reused buffer by a receiver process, then an empty message, answered with the byte count
    (the acknowledgement, as our COMPLETED). No checksums, no pages, no window."""
    try:
        import zmq
    except ImportError:
        return "not run: pyzmq is not installed (dev extra)"
    receiver = subprocess.Popen(
        [sys.executable, "-c", ZMQ_RECEIVER, str(frame_bytes)], stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None
    data_port, ack_port = json.loads(receiver.stdout.readline())
    ctx = zmq.Context()
    data, acks = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    data.connect(f"tcp://127.0.0.1:{data_port}")
    acks.connect(f"tcp://127.0.0.1:{ack_port}")
    payload = _source()
    out: dict[str, float] = {}
    try:

        def one(size: int) -> float:
            start = time.perf_counter()
            for offset in range(0, size, frame_bytes):
                data.send(payload[offset : min(offset + frame_bytes, size)], copy=False)
            data.send(b"")
            assert int(acks.recv()) == size
            return size * 8 / (time.perf_counter() - start) / 1e9

        one(MIB)  # connect and warm up
        for size_mib in sizes_mib:
            rates = [one(size_mib * MIB) for _ in range(reps if size_mib < 64 else 3)]
            out[f"{size_mib}MiB"] = round(statistics.median(rates), 3)
        data.send(b"q")
    finally:
        data.close(linger=1000)
        acks.close(linger=0)
        ctx.term()
        receiver.wait(timeout=10)
    return out


RAW_RECEIVER = """
import socket, sys, xxhash
frame, check = int(sys.argv[1]), sys.argv[2] == "check"
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
arena = memoryview(bytearray(1024 * 2**20))
head = bytearray(8)
while conn.recv_into(head, 8, socket.MSG_WAITALL) == 8:
    size = int.from_bytes(head, "big")
    for offset in range(0, size, frame):
        view = arena[offset : min(offset + frame, size)]
        conn.recv_into(view, len(view), socket.MSG_WAITALL)
        if check:
            xxhash.xxh3_64_intdigest(view)
    conn.sendall(head)
"""


def _raw_socket(sizes_mib: tuple[int, ...], frame_bytes: int, check: bool) -> dict[str, float]:
    """Python's own ceiling: one blocking TCP socket per side, `frame_bytes` per `sendall` /
    `recv_into(MSG_WAITALL)` from a large source into a large destination, and (with `check`)
    the payload check ours computes, XXH3-64 of every frame on both sides; nothing else."""
    receiver = subprocess.Popen(
        [sys.executable, "-c", RAW_RECEIVER, str(frame_bytes), "check" if check else "plain"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None
    sock = socket.create_connection(("127.0.0.1", int(receiver.stdout.readline())))
    payload = _source()
    out: dict[str, float] = {}
    try:

        def one(size: int) -> float:
            start = time.perf_counter()
            sock.sendall(size.to_bytes(8, "big"))
            for offset in range(0, size, frame_bytes):
                view = payload[offset : min(offset + frame_bytes, size)]
                if check:
                    xxhash.xxh3_64_intdigest(view)
                sock.sendall(view)
            assert int.from_bytes(sock.recv(8, socket.MSG_WAITALL), "big") == size
            return size * 8 / (time.perf_counter() - start) / 1e9

        one(MIB)  # warm up
        for size_mib in sizes_mib:
            rates = [one(size_mib * MIB) for _ in range(5 if size_mib < 64 else 3)]
            out[f"{size_mib}MiB"] = round(statistics.median(rates), 3)
    finally:
        sock.close()
        receiver.wait(timeout=10)
    return out


# -- scenarios -----------------------------------------------------------------------------
def loopback(mooncake_python: str | None, rounds: int, frame_bytes: int) -> dict[str, object]:
    """Ours next to iperf3 at the same number of TCP streams, measured back to back and the
    whole comparison repeated `rounds` times: on a shared host the load shifts within seconds.
    After the one-connection cell, the one-connection peers: pyzmq and Python's raw-socket
    ceiling with and without our payload check. Ours runs with payload checks (the default) at
    every size, and without them (`payload_checks=False` at both ends) at 64 MiB+."""
    process, port = _start_receiver("127.0.0.1")
    unchecked_process, unchecked_port = _start_receiver("127.0.0.1", payload_checks=False)
    address = PeerAddress("127.0.0.1", port)
    unchecked_address = PeerAddress("127.0.0.1", unchecked_port)
    ours: dict[str, list[float]] = {}
    unchecked: dict[str, list[float]] = {}
    iperf: dict[str, list[float]] = {}
    zmq: dict[str, list[float]] = {}
    raw: dict[str, dict[str, list[float]]] = {"plain": {}, "xxh3": {}}
    zmq_status = "ok"
    try:
        for _ in range(rounds):
            for connections in CONNECTIONS:
                rate = _iperf3("127.0.0.1", connections, seconds=2.0)
                if rate is not None:
                    iperf.setdefault(f"{connections}stream", []).append(rate)
                for size_mib in SIZES_MIB:
                    reps = 5 if size_mib < 64 else 3
                    sizes = [size_mib * MIB]
                    rate = asyncio.run(
                        _goodput(address, connections, sizes, reps, frame_bytes=frame_bytes)
                    )
                    ours.setdefault(f"{size_mib}MiB x{connections}conn", []).append(rate)
                    if size_mib < 64:
                        continue
                    rate = asyncio.run(
                        _goodput(
                            unchecked_address, connections, sizes, reps,
                            frame_bytes=frame_bytes, payload_checks=False,
                        )
                    )  # fmt: skip
                    unchecked.setdefault(f"{size_mib}MiB x{connections}conn", []).append(rate)
                if connections > 1:
                    continue
                peer = _pyzmq(SIZES_MIB, 5, 4 * MIB)
                if isinstance(peer, str):
                    zmq_status = peer
                else:
                    for key, value in peer.items():
                        zmq.setdefault(key, []).append(value)
                for name, runs in raw.items():
                    for key, value in _raw_socket(SIZES_MIB, frame_bytes, name == "xxh3").items():
                        runs.setdefault(key, []).append(value)
    finally:
        _stop(process)
        _stop(unchecked_process)
    mooncake = {f"{s}MiB": _mooncake(mooncake_python, s * MIB, 3) for s in (64, 256)}
    return {
        "frame_bytes": frame_bytes,
        "prfaas_gbps": _spread(ours),
        "prfaas_no_payload_checks_gbps": _spread(unchecked),
        "iperf3_gbps": _spread(iperf) if iperf else "not run: iperf3 is not installed",
        "pyzmq_push_pull_1conn_gbps": _spread(zmq) if zmq else zmq_status,
        "raw_python_socket_1conn_gbps": _spread(raw["plain"]),
        "raw_python_socket_xxh3_1conn_gbps": _spread(raw["xxh3"]),
        "mooncake_te_tcp": mooncake,
        "ratios_64MiB_plus": _ratios(ours, iperf, mooncake, zmq, raw),
        "ratios_64MiB_plus_no_payload_checks": _ratios(unchecked, iperf, mooncake, zmq, raw),
        "ratios_all_sizes_vs_pyzmq": {
            f"{s}MiB x1conn / pyzmq": round(max(ours[f"{s}MiB x1conn"]) / max(zmq[f"{s}MiB"]), 3)
            for s in SIZES_MIB
            if zmq
        },
    }


def _spread(runs: dict[str, list[float]]) -> dict[str, dict[str, object]]:
    return {key: {"best": max(values), "runs": values} for key, values in runs.items()}


def _ratios(
    ours: dict[str, list[float]],
    iperf: dict[str, list[float]],
    mooncake: dict[str, Any],
    zmq: dict[str, list[float]],
    raw: dict[str, dict[str, list[float]]],
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
        if zmq:
            out[f"{size_mib}MiB best / pyzmq best"] = round(best / max(zmq[f"{size_mib}MiB"]), 3)
        for name, runs in raw.items():
            peer_best = max(runs[f"{size_mib}MiB"])
            key = f"{size_mib}MiB best / raw Python socket ({name}) best"
            out[key] = round(best / peer_best, 3)
            if iperf:
                out[f"raw Python socket ({name}) {size_mib}MiB best / iperf3 best"] = round(
                    peer_best / max(max(v) for v in iperf.values()), 3
                )
    return out


def shaped(
    rates_bits_per_s: list[float], one_way_delay_s: float, frame_bytes: int
) -> dict[str, object]:
    results: dict[str, object] = {
        "mode": "delay_return_path_only: data over the shaped veth pair, the whole RTT on the "
        "return path (linkemu._return_path_delayed)",
    }
    for rate in rates_bits_per_s:
        # The data path stays in the kernel (see linkemu._return_path_delayed): the Python
        # delay line forwarding every data packet would be the bottleneck above ~1 Gbit/s.
        spec = EmulatedLinkSpec(rate, one_way_delay_s=one_way_delay_s, delay_return_path_only=True)
        with emulated_link(spec) as link:
            results[f"{rate / 1e9:g}Gbit"] = _shaped_one(link, rate, frame_bytes)
    return results


def header_ceiling(mtu_bytes: int) -> float:
    """Payload per byte tbf counts, for full-sized TCP segments: tbf charges the whole frame
    (14-byte Ethernet header included), TCP carries MTU - 20 (IP) - 20 (TCP) - 12 (timestamps)."""
    return (mtu_bytes - 52) / (mtu_bytes + 14)


def _tbf_bytes(netns: str, device: str) -> int:
    """Bytes the device's root qdisc (tbf) has sent so far."""
    out = subprocess.run(
        ["tc", "-n", netns, "-s", "-j", "qdisc", "show", "dev", device],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return int(json.loads(out.stdout)[0]["bytes"])


def _shaped_one(link: EmulatedLink, rate: float, frame_bytes: int) -> dict[str, object]:
    """Steady state on a persistent link, for us and iperf3 alike: we send 0.5 s of traffic
    before timing 3 s of it (the hosts keep congestion windows across idle gaps, see
    `linkemu.HOST_SYSCTLS`); iperf3 omits its first second. Per stream count, ours and iperf3
    back to back. `payload_per_tbf_byte` is measured: payload we sent (warm-up included) over
    the bytes the sender's tbf let through meanwhile (headers, our frame headers, retransmits)."""
    total = int(rate / 8 * 3.0)
    warmup = int(rate / 8 * 0.5)
    sizes = [min(64 * MIB, total - o) for o in range(0, total, 64 * MIB)]
    process, port = _start_receiver(link.receiver_ip, link.receiver_netns)
    ours: dict[str, dict[str, Any]] = {}
    iperf: dict[str, float | None] = {}
    try:
        for connections in (1, 4):
            address = link.receiver_address(port)
            before = _tbf_bytes(link.sender_netns, link.sender_device)
            tcp: dict[str, object] = {}
            run = _goodput(address, connections, sizes, 1, netns=link.sender_netns,
                           warmup_bytes=warmup, frame_bytes=frame_bytes,
                           signals=tcp)  # fmt: skip
            gbps = asyncio.run(run)
            wire = _tbf_bytes(link.sender_netns, link.sender_device) - before
            ours[f"{connections}conn"] = {
                "gbps": gbps,
                "of_shaped": round(gbps * 1e9 / rate, 3),
                "payload_per_tbf_byte": round((warmup + total) / wire, 4),
                **tcp,
            }
            iperf[f"{connections}stream"] = _iperf3(
                link.receiver_ip,
                connections,
                netns_server=link.receiver_netns,
                netns_client=link.sender_netns,
                omit_s=1,
            )
    finally:
        _stop(process)
    out: dict[str, object] = {
        "shaped_gbps": rate / 1e9,
        "header_ceiling": round(header_ceiling(link.spec.mtu_bytes), 4),
        "mtu_bytes": link.spec.mtu_bytes,
        "frame_bytes": frame_bytes,
        "prfaas": ours,
        "load_average": os.getloadavg(),
    }
    if shutil.which("iperf3") is None:
        out["iperf3_gbps"] = "not run: iperf3 is not installed"
        return out
    out["iperf3_gbps"] = iperf
    ratios: dict[str, float] = {}
    for n in (1, 4):
        mine, peer = ours[f"{n}conn"]["gbps"], iperf[f"{n}stream"]
        ratios[f"prfaas {n}conn / shaped"] = round(mine * 1e9 / rate, 3)
        if peer:
            ratios[f"iperf3 -P {n} / shaped"] = round(peer * 1e9 / rate, 3)
            ratios[f"prfaas {n}conn / iperf3 -P {n}"] = round(mine / peer, 3)
    out["ratios"] = ratios
    return out


# -- layer-wise overlap with a real engine prefill ----------------------------------------
OVERLAP_PRESET = "tiny-qwen3-next"
OVERLAP_PROMPT_TOKENS = 2048


async def _overlap_once(
    prefill: Any, sender: Sender, address: PeerAddress, prompt: list[int], rid: str,
    *, pipelined: bool,
) -> dict[str, float]:  # fmt: skip
    """One prefill shipped to the receiver. Pipelined: each layer's slices are queued from the
    engine's export hook as the layer finishes (as `serve` does); otherwise the whole export is
    taken first and then sent. Times from the same clock: `tail_ms` is from the last layer's
    compute (its export hook) to COMPLETED (every byte acknowledged)."""
    from prfaas import engine  # the engine extra; no torch in this module

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    layer_s: list[float] = []
    params = engine.SamplingParams(max_tokens=1)

    def on_layer(record: Any) -> None:
        layer_s.append(time.perf_counter())
        if pipelined:
            loop.call_soon_threadsafe(queue.put_nowait, record)

    def compute() -> None:
        try:
            exported = prefill.export_prefill(rid, prompt, params, on_layer=on_layer)
            if not pipelined:
                for record in exported.records:
                    loop.call_soon_threadsafe(queue.put_nowait, record)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    transfer = await sender.start_transfer(address, RequestId(rid))
    start = time.perf_counter()
    computing = loop.run_in_executor(None, compute)
    nbytes = 0
    while (record := await queue.get()) is not None:
        key = SliceKey(record.layer_index, record.group_index, record.token_start, record.token_end)
        await transfer.send_slice(key, record.dtype, record.shape, record.data)
        nbytes += len(record.data)
    await transfer.finish()
    acked = time.perf_counter()
    await computing
    return {
        "tail_ms": (acked - layer_s[-1]) * 1e3,
        "total_ms": (acked - start) * 1e3,
        "layers_ms": (layer_s[-1] - layer_s[0]) * 1e3,
        "bytes": nbytes,
    }


async def _send_timed(sender: Sender, address: PeerAddress, records: list[Any], rid: str) -> float:
    """Milliseconds from the first `send_slice` of ready `records` to COMPLETED: the floor of a
    tail (the whole export: export-then-send's; the last layer's: the pipelined one's)."""
    transfer = await sender.start_transfer(address, RequestId(rid))
    start = time.perf_counter()
    for record in records:
        key = SliceKey(record.layer_index, record.group_index, record.token_start, record.token_end)
        await transfer.send_slice(key, record.dtype, record.shape, record.data)
    await transfer.finish()
    return (time.perf_counter() - start) * 1e3


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


async def _overlap_runs(
    prefill: Any, address: PeerAddress, reps: int, tag: str,
    *, netns: str | None = None, frame_bytes: int = 4 * MIB, warmup_bytes: int = MIB,
) -> dict[str, object]:  # fmt: skip
    factory: SocketFactory | None = None
    if netns is not None:
        factory = functools.partial(socket_in_netns, netns)
    config = replace(_config(4), max_frame_bytes=frame_bytes)
    sender = Sender(config, IDENTITY, TcpTransport(socket_factory=factory))
    await _send_requests(sender, address, [warmup_bytes], f"{tag}-warmup")
    runs: dict[str, list[dict[str, float]]] = {"pipelined": [], "export_then_send": []}
    floors: dict[str, list[float]] = {"send_whole_export_ms": [], "send_last_layer_ms": []}
    rng = random.Random(7)
    ready = _overlap_prompt(random.Random(3))
    from prfaas import engine

    records = list(prefill.export_prefill(f"{tag}-ready", ready, engine.SamplingParams()).records)
    last = [r for r in records if r.layer_index == records[-1].layer_index]
    try:
        for rep in range(reps):  # alternate, so all see the same host conditions
            for mode in ("pipelined", "export_then_send"):
                # A fresh prompt each time: no prefix-cache hit shortens the prefill.
                prompt, rid = _overlap_prompt(rng), f"{tag}-{mode}-{rep}"
                once = _overlap_once(
                    prefill, sender, address, prompt, rid, pipelined=mode == "pipelined"
                )
                runs[mode].append(await once)
            whole = await _send_timed(sender, address, records, f"{tag}-whole-{rep}")
            floors["send_whole_export_ms"].append(whole)
            alone = await _send_timed(sender, address, last, f"{tag}-last-{rep}")
            floors["send_last_layer_ms"].append(alone)
    finally:
        await sender.close()
    out: dict[str, object] = {
        "bytes_per_request": runs["pipelined"][0]["bytes"],
        "bytes_last_layer": sum(len(r.data) for r in last),
        "floors_without_engine": {name: _summary(values) for name, values in floors.items()},
    }
    for mode, values in runs.items():
        out[mode] = {
            name: _summary([v[name] for v in values])
            for name in ("tail_ms", "total_ms", "layers_ms")
        }
    return out


def _overlap_prompt(rng: random.Random) -> list[int]:
    return [rng.randrange(3, 250) for _ in range(OVERLAP_PROMPT_TOKENS)]


def layer_overlap(
    reps: int, shaped_rate: float | None, one_way_delay_s: float
) -> dict[str, object]:
    """Pipelined vs export-then-send for a real engine prefill (tiny preset, 2K prompt), over
    loopback and, when link emulation is available, a shaped link with 20 ms of RTT."""
    try:
        from prfaas import engine
        from prfaas.kvcache import SnapshotPolicy
    except ImportError as exc:
        return {"status": f"not run: the engine extra is missing ({exc})"}
    model = engine.build_preset(OVERLAP_PRESET)
    # One chunk for the whole prompt (no snapshot boundary inside it), so every layer's
    # export hook fires as that layer finishes the prompt, spread over the whole forward.
    config = engine.EngineConfig(
        chunk_tokens=OVERLAP_PROMPT_TOKENS,
        snapshot_policy=SnapshotPolicy.request_end(),
        capacity_bytes=256 * MIB,
    )
    prefill = engine.Engine(model, config)
    prefill.export_prefill("warmup", _overlap_prompt(random.Random(1)), engine.SamplingParams())
    out: dict[str, object] = {
        "preset": OVERLAP_PRESET,
        "prompt_tokens": OVERLAP_PROMPT_TOKENS,
        "engine": "chunk_tokens=2048, snapshot_policy=request_end, 4 connections",
        "repetitions": reps,
    }
    process, port = _start_receiver("127.0.0.1")
    try:
        address = PeerAddress("127.0.0.1", port)
        out["loopback"] = asyncio.run(_overlap_runs(prefill, address, reps, "lo"))
    finally:
        _stop(process)
    if shaped_rate is None:
        return out
    spec = EmulatedLinkSpec(
        shaped_rate, one_way_delay_s=one_way_delay_s, delay_return_path_only=True
    )
    reason = unavailable_reason(spec)
    key = f"shaped_{shaped_rate / 1e9:g}Gbit_20ms_rtt_return_path_delay"
    if reason is not None:
        out[key] = {"skipped": reason}
        return out
    with emulated_link(spec) as link:
        process, port = _start_receiver(link.receiver_ip, link.receiver_netns)
        try:
            run = _overlap_runs(prefill, link.receiver_address(port), reps, "sh",
                                netns=link.sender_netns, frame_bytes=SHAPED_FRAME_BYTES,
                                warmup_bytes=int(shaped_rate / 8 * 0.5))  # fmt: skip
            out[key] = asyncio.run(run)
        finally:
            _stop(process)
    out["load_average_after"] = os.getloadavg()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", default="bench", choices=["bench", "receiver"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--no-payload-checks", action="store_true", help="receiver role only")
    parser.add_argument(
        "--mooncake-python",
        default=sys.executable if importlib.util.find_spec("mooncake") else None,
        help="a Python with mooncake-transfer-engine-non-cuda (default: this one, if it has it)",
    )
    parser.add_argument("--shaped-gbit", default="0.1,1,5")
    parser.add_argument("--rounds", type=int, default=2, help="loopback comparison repeats")
    parser.add_argument(
        "--loopback-frame-mib", type=float, default=LOOPBACK_FRAME_BYTES / MIB,
        help="frame size on loopback, ours and the raw-socket peers",
    )  # fmt: skip
    parser.add_argument("--shaped-frame-mib", type=float, default=SHAPED_FRAME_BYTES / MIB)
    parser.add_argument("--overlap-shaped-gbit", type=float, default=1.0, help="0: loopback only")
    parser.add_argument("--overlap-reps", type=int, default=7)
    parser.add_argument("--only", default="loopback,shaped,overlap")
    args = parser.parse_args()
    if args.role == "receiver":
        asyncio.run(_receive(args.host, not args.no_payload_checks))
        return
    rates = [float(r) * 1e9 for r in args.shaped_gbit.split(",") if r]
    delay = EmulatedLinkSpec(rate_bits_per_s=1e9, one_way_delay_s=0.01)
    reason = unavailable_reason(delay)
    parts = set(args.only.split(","))
    report: dict[str, object] = {
        "benchmark": "transfer_bench",
        "git_sha": git_sha(),
        "host": host(),
        # Loopback goodput depends on it more than on anything we do: on the 2-core host,
        # iperf3 -P 1 reached 20 Gbit/s under bbr and 58 under cubic (docs/benchmarks.md).
        "tcp_congestion_control": Path("/proc/sys/net/ipv4/tcp_congestion_control")
        .read_text()
        .strip(),
        "load_average_before": os.getloadavg(),
    }
    if "loopback" in parts:
        frame = int(args.loopback_frame_mib * MIB)
        report["loopback"] = loopback(args.mooncake_python, args.rounds, frame)
    if "shaped" in parts:
        frame_bytes = int(args.shaped_frame_mib * MIB)
        report["shaped_20ms_rtt"] = (
            shaped(rates, 0.01, frame_bytes) if reason is None else {"skipped": reason}
        )
    if "overlap" in parts:
        overlap_rate = args.overlap_shaped_gbit * 1e9 if args.overlap_shaped_gbit > 0 else None
        report["layer_overlap"] = layer_overlap(args.overlap_reps, overlap_rate, 0.01)
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
