"""The systems `router_overhead.py` compares, each started as its own processes and stopped
with the run (every child in `Processes`, which ends them all on exit):

    workers        N fixed-cost OpenAI workers (`openai_worker.py`), each on the port it
                   chose and printed (port 0 read back)
    vllm-router    vllm-router 0.1.17 over the workers, `--policy cache_aware`
    sglang-router  sglang-router 0.3.2 over the workers, `--policy cache_aware`
    prfaas         `prfaas instance` x 3 (emulated prfaas-1t: a PrfaaS prefill, a PD prefill,
                   a PD decode) and `prfaas router`, from one deployment file, as a multi-host
                   deployment starts them (docs/serving.md); with `interpose`, the router's
                   own file names other ports for the instances (the counting proxies')

The peers live in their own venv (`PEER_VENV`, git-ignored), built here from PyPI when
`bootstrap` is on; never in `.venv`. prfaas is reached only through its CLI and HTTP API, so
this survives the serve package's moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

import httpx

from provenance import REPO_ROOT

PEER_VENV = REPO_ROOT / ".bench-venvs" / "routers"
PEERS = {"vllm-router": "0.1.17", "sglang-router": "0.3.2"}
PRFAAS = REPO_ROOT / ".venv" / "bin" / "prfaas"
BENCHMARKS = Path(__file__).resolve().parent
MODEL = "prfaas-1t"
#: Every emulated instance: prfaas-1t timing x 1e-6 and KV bytes x 1e-6, so neither compute nor
#: the KV's bytes cost anything measurable: what is left is the serving path itself.
EMULATION = "{time_factor: 1.0e-6, byte_factor: 1.0e-6}"
INSTANCES = (
    ("prfaas-0", "prfaas-prefill", "prfaas", "h200"),
    ("pdp-0", "pd-prefill", "pd", "h20"),
    ("pdd-0", "pd-decode", "pd", "h20"),
)
START_TIMEOUT_S = 120.0


def free_port() -> int:
    """A port the kernel just gave out (read back, then released for the child to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes(contextlib.AbstractContextManager["Processes"]):
    """Children started for one system, each logging to `log_dir`/NAME.log; on exit each gets
    SIGTERM, then SIGKILL after 10 s."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, *, piped: bool = False
    ) -> subprocess.Popen[bytes]:
        """Child `name`; with `piped` its stdout is a pipe the caller reads (else the log)."""
        log = (self.log_dir / f"{name}.log").open("wb")
        self._logs.append(log)
        out = subprocess.PIPE if piped else log
        child = subprocess.Popen(argv, stdout=out, stderr=log, env=env, start_new_session=True)
        self.children[name] = child
        return child

    def log_tail(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")[-1500:]

    def __exit__(self, *exc: object) -> None:
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
        for child in self.children.values():
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
        for log in self._logs:
            log.close()


def ensure_peer_venv(bootstrap: bool) -> str | None:
    """None when the peers' venv holds both routers at their versions, else why not (built
    first when `bootstrap`: `python -m venv`, then pip from PyPI, binary wheels only)."""
    python = PEER_VENV / "bin" / "python"
    stamp = PEER_VENV / (".routers-" + "-".join(f"{k}{v}" for k, v in PEERS.items()))
    if stamp.exists():
        return None
    if not bootstrap:
        return f"{PEER_VENV.relative_to(REPO_ROOT)} is absent (run without --no-bootstrap)"
    subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pins = [f"{name}=={version}" for name, version in PEERS.items()]
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--only-binary", ":all:", *pins],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return f"pip install {' '.join(pins)} failed: {done.stderr.strip()[-300:]}"
    stamp.touch()
    return None


def start_workers(
    procs: Processes, count: int, first_token_ms: float, token_ms: float
) -> list[int]:
    """`count` fixed-cost workers; their ports."""
    ports = []
    for i in range(count):
        argv = [sys.executable, str(BENCHMARKS / "openai_worker.py"), "--port", "0",
                "--model", MODEL, "--first-token-ms", str(first_token_ms),
                "--token-ms", str(token_ms)]  # fmt: skip
        child = procs.start(f"worker-{i}", argv, piped=True)
        assert child.stdout is not None
        line = child.stdout.readline().decode().split()
        if line[:1] != ["ready"]:
            raise RuntimeError(f"worker {i} did not start: {procs.log_tail(f'worker-{i}')}")
        ports.append(int(line[1]))
    return ports


def peer_argv(name: str, port: int, worker_ports: list[int]) -> list[str]:
    """The command line of peer router `name` over the workers, cache-aware."""
    urls = [f"http://127.0.0.1:{p}" for p in worker_ports]
    common = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
              "--policy", "cache_aware", "--prometheus-port", str(free_port()),
              "--log-level"]  # fmt: skip
    if name == "vllm-router":
        return [str(PEER_VENV / "bin" / "vllm-router"), *common, "warning"]
    sglang = [str(PEER_VENV / "bin" / "python"), "-m", "sglang_router.launch_router"]
    return [*sglang, *common, "warn"]


async def start_peer(procs: Processes, name: str, worker_ports: list[int]) -> tuple[int, int]:
    """Peer router `name` started and answering a completion; its port and pid."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # sglang-router looks for a tokenizer
    child = procs.start(name, peer_argv(name, port, worker_ports), env)
    await _wait_serving(procs, name, f"http://127.0.0.1:{port}/v1/completions")
    return port, child.pid


async def _wait_serving(procs: Processes, name: str, url: str) -> None:
    """Until `url` answers a one-token completion (200), or the child exits or time is up."""
    deadline = time.monotonic() + START_TIMEOUT_S
    body = {"model": MODEL, "prompt": "ready?", "max_tokens": 1}
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            if procs.children[name].poll() is not None:
                raise RuntimeError(f"{name} exited: {procs.log_tail(name)}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.post(url, json=body)).status_code == 200:
                    return
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{name} did not serve within {START_TIMEOUT_S:.0f} s")


def deployment_yaml(threshold_tokens: int, router_port: int, http_ports: dict[str, int],
                    transfer_ports: dict[str, int]) -> str:  # fmt: skip
    """The emulated deployment: t = `threshold_tokens`; the inter-cluster link fast and
    without delay (100 Gbit/s, RTT 0, paced in user space), so the path costs no wait."""
    lines = [
        f"model: {MODEL}",
        "block_tokens: 16",
        f"threshold_tokens: {threshold_tokens}",
        f"router: {{host: 127.0.0.1, port: {router_port}, max_inflight_requests: 256}}",
        f"emulation: {EMULATION}",
        "link: {rate_gbps: 100.0, rtt_ms: 0, shaping: token-bucket}",
        "rebalance: {enabled: false}",
        "instances:",
    ]
    for name, role, cluster, chip in INSTANCES:
        lines.append(
            f"  - {{name: {name}, role: {role}, cluster: {cluster}, backend: emulated, "
            f"chip: {chip}, capacity_mib: 8192, max_batch_size: 256, "
            f"http_port: {http_ports[name]}, transfer_port: {transfer_ports[name]}}}"
        )
    return "\n".join(lines) + "\n"


#: Put in front of an instance by the caller: (instance name, its port) -> the port to call.
Interpose = Callable[[str, int], Awaitable[int]]


async def start_prfaas(
    procs: Processes, threshold_tokens: int, interpose: Interpose | None = None
) -> tuple[int, dict[str, int]]:
    """The three instances and the router, serving; the router's port and every pid. With
    `interpose`, the router is told each instance is at the port it returns (a proxy's)."""
    names = [spec[0] for spec in INSTANCES]
    http_ports = {n: free_port() for n in names}
    transfer_ports = {n: free_port() for n in names}
    router_port = free_port()
    own = procs.log_dir / f"deployment-t{threshold_tokens}.yaml"
    own.write_text(deployment_yaml(threshold_tokens, router_port, http_ports, transfer_ports))
    routed = own
    if interpose is not None:
        called = {n: await interpose(n, port) for n, port in http_ports.items()}
        routed = procs.log_dir / f"deployment-t{threshold_tokens}-router.yaml"
        routed.write_text(deployment_yaml(threshold_tokens, router_port, called, transfer_ports))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PRFAAS_TRANSFER_SECRET": secrets.token_hex(24),
           "PRFAAS_ADMIN_TOKEN": secrets.token_hex(24)}  # fmt: skip
    pids = {}
    for name in names:
        argv = [str(PRFAAS), "instance", str(own), "--name", name]
        pids[name] = procs.start(f"prfaas-{name}", argv, env).pid
    argv = [str(PRFAAS), "router", str(routed), "--quiet"]
    pids["router"] = procs.start("prfaas-router", argv, env).pid
    await _wait_healthy(procs, f"http://127.0.0.1:{router_port}")
    return router_port, pids


async def _wait_healthy(procs: Processes, url: str) -> None:
    """Until the router's /health says every instance is registered (polling with asyncio,
    so proxies on this loop serve meanwhile)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            for name, child in procs.children.items():
                if name.startswith("prfaas") and child.poll() is not None:
                    raise RuntimeError(f"{name} exited: {procs.log_tail(name)}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if (await client.get(url + "/health")).json().get("status") == "ok":
                    return
            await asyncio.sleep(0.3)
    raise RuntimeError(f"prfaas was not healthy within {START_TIMEOUT_S:.0f} s")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
