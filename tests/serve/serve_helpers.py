"""Shared builders for the serve tests."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    EmulationSpec,
    InstanceRole,
    InstanceSpec,
    RouterSpec,
)
from prfaas.serve.launch.launcher import Launcher


@contextmanager
def running(deployment: Deployment, timeout_s: float = 180) -> Iterator[Launcher]:
    """A deployment up and healthy for a module's tests, then stopped with no child left.

    The default bound is generous because a loaded 2-core host starts instances slowly; with
    no secret in the file or environment the launcher makes one per run.
    """
    with Launcher(deployment) as launcher:
        launcher.wait_healthy(timeout_s=timeout_s)
        yield launcher
    assert all(child.poll() is not None for child in launcher.children.values())


def emulated_instance(name: str, role: InstanceRole, cluster: str, chip: str) -> InstanceSpec:
    """An emulated instance with a pool large enough for any test prompt."""
    return InstanceSpec(
        name=name,
        role=role,
        cluster=cluster,
        backend=Backend.EMULATED,
        chip=chip,
        capacity_mib=8192,
    )


def emulated_deployment(
    *, time_factor: float = 0.01, num_decode: int = 1, **updates: Any
) -> Deployment:
    """A small emulated PrfaaS-PD deployment of `prfaas-1t` on a free port: one PrfaaS
    prefill, one PD prefill and `num_decode` PD decode instances (t = 128 tokens);
    `updates` replace its fields."""
    decode = tuple(
        emulated_instance(f"pdd-{i}", InstanceRole.PD_DECODE, "pd", "h20")
        for i in range(num_decode)
    )
    deployment = Deployment(
        model="prfaas-1t",
        block_tokens=16,
        threshold_tokens=128,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=time_factor, byte_factor=1e-3),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            *decode,
        ),
    )
    return deployment.model_copy(update=updates)


def make_certificate(where: Path, hostname: str) -> tuple[Path, Path]:
    """A self-signed certificate for `hostname` and its key (skips without openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={hostname}",
         "-addext", f"subjectAltName=DNS:{hostname}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def recording_relay(target: tuple[str, int]) -> Iterator[tuple[int, bytearray]]:
    """A TCP relay on a free loopback port to `target`: yields its port and every byte the
    connecting side sent through it (what a capture on the link would see)."""
    seen = bytearray()
    lock = threading.Lock()
    listener = socket.create_server(("127.0.0.1", 0))

    def pump(source: socket.socket, sink: socket.socket, record: bool) -> None:
        with source, sink:
            while data := _recv(source):
                if record:
                    with lock:
                        seen.extend(data)
                sink.sendall(data)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed: the relay is over
                return
            try:
                upstream = socket.create_connection(target)
            except OSError:  # the target does not listen yet: as if it were down
                client.close()
                continue
            threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(
                target=pump, args=(upstream.dup(), client.dup(), False), daemon=True
            ).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def fake_info(name: str, role: str = "pd-decode", boot_id: str = "b") -> p.InstanceInfo:
    """What an instance's `/info` says, for a router driven against fake instances."""
    return p.InstanceInfo(
        name=name,
        role=role,
        cluster="pd",
        boot_id=boot_id,
        model="m",
        max_context_tokens=4096,
        transfer_host="127.0.0.1",
        transfer_port=1,
        kv_bytes_per_token=1.0,
        kv_capacity_bytes=1,
        max_batch_size=1,
        cache=p.CacheIdentityBody(
            block_tokens=16, model_fingerprint="f", seed=0, algorithm="a", group_kinds=[]
        ),
    )


def wait_healthy(
    url: str, children: Sequence[subprocess.Popen[bytes]], timeout_s: float = 180
) -> None:
    """Until `url`'s `/health` says ok, for processes a test started itself; a child that
    exits first (with its stderr, when piped) or the deadline fails the test."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in children:
            if child.poll() is not None:
                err = child.stderr.read()[-2000:] if child.stderr is not None else b""
                raise AssertionError(f"{child.args} exited: {err!r}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if httpx.get(url + "/health", timeout=2).json().get("status") == "ok":
                return
        time.sleep(0.25)
    raise AssertionError(f"{url} was not healthy within {timeout_s:.0f} s")


def stop_all(children: Sequence[subprocess.Popen[bytes]], timeout_s: float = 30) -> None:
    """Terminate every child at once, then reap each (killed past `timeout_s`)."""
    for child in children:
        child.terminate()
    for child in children:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
