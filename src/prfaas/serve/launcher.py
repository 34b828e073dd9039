"""`prfaas up`: start every process of a deployment on this host, wait for health, stop cleanly.

    Launcher.start()  ports resolved, deployment written to a temp file, one child per
                      instance (`prfaas instance --name N`) and the router (`prfaas router`)
    wait_healthy()    router /health says "ok" (every instance registered)
    stop()            SIGTERM to every child, SIGKILL after a grace period, temp file removed

Children die with the launcher even if it is killed with SIGKILL (PR_SET_PDEATHSIG), so no
process outlives it. They run with one torch thread each, offline (`config.CHILD_ENV`).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx
import yaml

from prfaas.serve.config import Deployment, child_environment, with_ports
from prfaas.serve.errors import DeploymentError

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0


def _die_with_parent() -> None:
    """Run in the child before exec: SIGTERM when the launcher goes away."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Launcher:
    def __init__(self, deployment: Deployment, *, quiet: bool = True) -> None:
        self.deployment = with_ports(deployment)
        self._quiet = quiet
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._file: Path | None = None

    @property
    def url(self) -> str:
        r = self.deployment.router
        return f"http://{r.host}:{r.port}"

    @property
    def children(self) -> dict[str, subprocess.Popen[bytes]]:
        return self._children

    def start(self) -> None:
        handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
        with handle:
            yaml.safe_dump(self.deployment.model_dump(mode="json"), handle)
        self._file = Path(handle.name)
        env = child_environment(self.deployment)
        base = [sys.executable, "-m", "prfaas"]
        for spec in self.deployment.instances:
            self._spawn(spec.name, [*base, "instance", str(self._file), "--name", spec.name], env)
        self._spawn("router", [*base, "router", str(self._file)], env)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        out = subprocess.DEVNULL if self._quiet else None
        self._children[name] = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=None,
            preexec_fn=_die_with_parent,  # noqa: PLW1509
        )

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, child in self._children.items():
                if child.poll() is not None:
                    raise DeploymentError(f"{name} exited with code {child.returncode}")
            with contextlib.suppress(httpx.HTTPError, ValueError):
                if httpx.get(self.url + "/health", timeout=1.0).json().get("status") == "ok":
                    return
            time.sleep(0.25)
        raise DeploymentError(f"the deployment was not healthy within {timeout_s:.0f} s")

    def stop(self) -> None:
        for child in self._children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for child in self._children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._file is not None:
            self._file.unlink(missing_ok=True)
            self._file = None

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def run_until_signal(launcher: Launcher) -> None:
    """Block until SIGINT or SIGTERM (or a child dies), then stop everything."""
    stopping = False

    def on_signal(signum: int, _: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping:
            dead = [n for n, c in launcher.children.items() if c.poll() is not None]
            if dead:
                print(f"prfaas: {', '.join(dead)} exited; shutting down", file=sys.stderr)
                break
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        launcher.stop()
