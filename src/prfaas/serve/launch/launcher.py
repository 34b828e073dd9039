"""`prfaas up`: start every process of a deployment on this host, wait for health, stop cleanly.

    Launcher.start()  ports left at 0 chosen and held until stop() (`serve.launch.ports`), the
                      link's shaping resolved (below), vLLM engines' log directory made
                      (`engine_log_dir`), deployment written to a temp file, one child per
                      instance (`prfaas instance --name N`) and the router (`prfaas
                      router`); on any failure, `stop()` before raising
    wait_healthy()    router /health says "ok" (every instance registered)
    respawn(name)     that child started again, same command and environment (the
                      supervisor's restart: `serve.launch.supervisor`); `supervised` lists the
                      children and the link's delay line, which is restarted the same way
    stop()            SIGTERM to every child, SIGKILL after a grace period, then the link's
                      namespaces (and delay-line process) removed, temp file removed; SIGINT
                      and SIGTERM are ignored meanwhile, so a second Ctrl-C cannot cut it short

Children share one environment: the transfer secret and the router's admin token, each from
the file, else the launcher's environment, else generated once per run (`admin_token` holds
it; `prfaas up` prints a generated one once).

The inter-cluster link (`link.shaping`): `kernel` or `auto` as root with iproute2 builds two
network namespaces joined by a tbf-shaped link at `link.rate_gbps` with the user-space delay
line for `link.rtt_ms` (`prfaas.transfer.linkemu`), and writes their names into the children's
deployment (`link.netns`); `token-bucket`, or `auto` when that cannot be done (the reason is
logged and kept in `link.shaping_reason`), paces the PrfaaS senders in user space (`kv_shipping`).

Children die with the launcher even if it is killed with SIGKILL (PR_SET_PDEATHSIG), so no
process outlives it (the delay line exits when its stdin closes); namespaces of a launcher
killed with SIGKILL stay behind (`ip netns list`: `pf<hex>s`, `pf<hex>r`). Children run with
one torch thread each, offline (`config.CHILD_ENV`).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from prfaas.serve.auth.admin import admin_token
from prfaas.serve.auth.control import ControlSigner
from prfaas.serve.config.deployment import (
    ADMIN_TOKEN_ENV_VAR,
    Backend,
    Deployment,
    InstanceRole,
    LinkShaping,
    NamespaceLink,
    child_environment,
    configured_admin_token,
    transfer_tls,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch.ports import with_held_ports
from prfaas.serve.launch.stopping import STOP_SIGNALS, raise_if_requested
from prfaas.transfer import linkemu
from prfaas.transfer.config import SECRET_ENV_VAR
from prfaas.transfer.errors import LinkEmulationError

PR_SET_PDEATHSIG = 1
STOP_GRACE_S = 5.0
#: The link's user-space delay line, supervised beside the children under this name.
DELAY_LINE = "link-delay-line"

log = logging.getLogger(__name__)


def die_with_parent() -> None:
    """Run in the child before exec: SIGTERM when the launcher goes away; the stop signals
    held around the fork (`_stop_signals_held`) unblocked again (a blocked mask survives
    exec)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this process while a child is forked and recorded. A fork
    with a `preexec_fn` runs the interpreter's at-fork callbacks (logging's lock), and a stop
    signal turned KeyboardInterrupt inside one is printed as "Exception ignored" and lost:
    `prfaas up` went on starting and serving (1 start in 3 here). Held, the signal is raised
    once the child is in `_children`, where the launcher stops what it started."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Launcher:
    def __init__(self, deployment: Deployment, *, quiet: bool = True) -> None:
        self.deployment = deployment
        self._held_ports: list[socket.socket] = []  # the ports start() chose, until stop()
        self._quiet = quiet
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}
        self._env: dict[str, str] = {}
        self.admin_token = admin_token(deployment, announce=False)
        self.admin_token_generated = configured_admin_token(deployment) is None
        self._file: Path | None = None
        self._link = contextlib.ExitStack()
        self._delay_line: linkemu.DelayLine | None = None

    @property
    def url(self) -> str:
        r = self.deployment.router
        return f"http://{r.host}:{r.port}"

    @property
    def children(self) -> dict[str, subprocess.Popen[bytes]]:
        return self._children

    @property
    def supervised(self) -> dict[str, subprocess.Popen[Any]]:
        """Every process the supervisor restarts when it exits: the children and the link's
        delay line (`DELAY_LINE`: while it is down the link is cut, and the PrfaaS instances
        report it so the router sends long prompts to PD-P)."""
        line = self._delay_line
        return {**self._children, **({DELAY_LINE: line.process} if line is not None else {})}

    def instance_auth(self) -> ControlSigner:
        """Signs calls to the instances' control API as the router does (operator tools)."""
        secret = self.deployment.secret or self._env[SECRET_ENV_VAR]
        return ControlSigner(secret.encode(), self.deployment)

    @property
    def admin_headers(self) -> dict[str, str]:
        """The header that opens the router's /admin/* endpoints."""
        return {"Authorization": f"Bearer {self.admin_token}"}

    def start(self) -> None:
        """Every process up (not yet healthy); on failure nothing is left behind."""
        try:
            self.deployment, self._held_ports = with_held_ports(self.deployment)
            transfer_tls(self.deployment)  # TLS files checked here: one error, not one per child
            self.deployment = _with_engine_log_dir(self._shape_link(self.deployment))
            self._spawn_all()
        except BaseException:
            self.stop()
            raise

    def _shape_link(self, deployment: Deployment) -> Deployment:
        """`link` with its shaping resolved: kernel (namespaces built, `netns` set) or token
        bucket (`shaping_reason` says why)."""
        link = deployment.link
        reason = _kernel_unavailable_reason(deployment)
        if reason is None:
            spec = linkemu.EmulatedLinkSpec(
                rate_bits_per_s=link.rate_gbps * 1e9, one_way_delay_s=link.rtt_ms / 2e3
            )
            try:
                built = self._link.enter_context(linkemu.emulated_link(spec))
            except LinkEmulationError as err:
                reason = str(err)
            else:
                self._delay_line = built.delay_line
                netns = NamespaceLink(
                    sender_netns=built.sender_netns,
                    receiver_netns=built.receiver_netns,
                    sender_ip=built.sender_ip,
                    receiver_ip=built.receiver_ip,
                )
                log.info(
                    "link shaped in the kernel: %s -> %s", netns.sender_netns, netns.receiver_netns
                )
                update = {"shaping": LinkShaping.KERNEL, "netns": netns, "shaping_reason": None}
                return deployment.model_copy(update={"link": link.model_copy(update=update)})
        if link.shaping is LinkShaping.KERNEL:
            raise DeploymentError(f"link.shaping is kernel but {reason}")
        if link.shaping is LinkShaping.AUTO:
            log.warning("prfaas: inter-cluster link paced by the token bucket: %s", reason)
        update = {"shaping": LinkShaping.TOKEN_BUCKET, "netns": None, "shaping_reason": reason}
        return deployment.model_copy(update={"link": link.model_copy(update=update)})

    def _spawn_all(self) -> None:
        handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)  # noqa: SIM115
        with handle:
            yaml.safe_dump(self.deployment.model_dump(mode="json"), handle)
        self._file = Path(handle.name)
        self._env = child_environment(self.deployment)
        self._env[ADMIN_TOKEN_ENV_VAR] = self.admin_token
        base = [sys.executable, "-m", "prfaas"]
        for spec in self.deployment.instances:
            raise_if_requested()
            argv = [*base, "instance", str(self._file), "--name", spec.name]
            self._argv[spec.name] = argv
            self.respawn(spec.name)
        self._argv["router"] = [*base, "router", str(self._file)]
        self.respawn("router")

    def respawn(self, name: str) -> None:
        """Start child `name` (again): the command and environment of the first start, in a
        process group of its own, so the terminal's Ctrl-C reaches `prfaas up` alone (which
        stops its children itself) and never a child in the middle of its start. The delay
        line is started again with its devices set up as at the first start (a failure is
        logged and leaves it exited, for the supervisor's budget)."""
        if name == DELAY_LINE:
            assert self._delay_line is not None
            try:
                self._delay_line.restart()
            except LinkEmulationError as err:
                log.warning("prfaas: the link's delay line did not restart: %s", err)
            return
        out = subprocess.DEVNULL if self._quiet else None
        with _stop_signals_held():
            self._children[name] = subprocess.Popen(
                self._argv[name],
                env=self._env,
                stdout=out,
                stderr=None,
                preexec_fn=die_with_parent,  # noqa: PLW1509
                process_group=0,
            )

    @property
    def engine_log_dir(self) -> str | None:
        """Where the vLLM engines write their output (one file per instance), if any."""
        d = self.deployment
        return d.vllm.log_dir if d.backend is Backend.VLLM else None

    @property
    def start_timeout_s(self) -> float:
        """How long a start may take: vLLM engines have a budget of their own."""
        d = self.deployment
        return d.vllm.start_timeout_s if d.backend is Backend.VLLM else d.supervisor.start_timeout_s

    def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Until the router says ok (within `start_timeout_s` unless told otherwise)."""
        if timeout_s is None:
            timeout_s = self.start_timeout_s
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            raise_if_requested()
            for name, child in self._children.items():
                if child.poll() is not None:
                    raise DeploymentError(f"{name} exited with code {child.returncode}")
            if self.is_healthy():
                return
            time.sleep(0.25)
        raise DeploymentError(f"the deployment was not healthy within {timeout_s:.0f} s")

    def is_serving(self, name: str) -> bool:
        """Whether child `name` answers now: an instance its signed /info, the router its
        /health (whatever it says of the instances)."""
        if name == DELAY_LINE:
            return self.supervised[name].poll() is None
        specs = {spec.name: spec for spec in self.deployment.instances}
        with contextlib.suppress(httpx.HTTPError):
            if name in specs:
                response = httpx.get(
                    specs[name].url + "/info", timeout=1.0, auth=self.instance_auth()
                )
                return response.status_code == 200
            return httpx.get(self.url + "/health", timeout=1.0).status_code in (200, 503)
        return False

    def is_healthy(self) -> bool:
        """Whether the router says every instance is registered and answering."""
        with contextlib.suppress(httpx.HTTPError, ValueError, AttributeError):
            return bool(httpx.get(self.url + "/health", timeout=1.0).json().get("status") == "ok")
        return False

    def stop(self) -> None:
        """Every child stopped, then the link and the temp file removed; once begun it is
        not cut short by a second Ctrl-C or SIGTERM (`_signals_ignored`)."""
        with _signals_ignored():
            self._stop()

    def _stop(self) -> None:
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
        self._link.close()  # after the children: nothing uses the namespaces any more
        self._delay_line = None
        if self._file is not None:
            self._file.unlink(missing_ok=True)
            self._file = None
        for sock in self._held_ports:
            sock.close()
        self._held_ports = []

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


def _with_engine_log_dir(deployment: Deployment) -> Deployment:
    """A vllm deployment whose engines write to a fresh directory of this run (unless the
    file names one): ~350 start-up lines per engine go there, not to the terminal."""
    if deployment.backend is not Backend.VLLM or deployment.vllm.log_dir:
        return deployment
    log_dir = tempfile.mkdtemp(prefix="prfaas-engine-logs-")
    vllm = deployment.vllm.model_copy(update={"log_dir": log_dir})
    return deployment.model_copy(update={"vllm": vllm})


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while the body runs (main thread only: elsewhere signal
    handlers cannot be set, and signals are handled by the main thread anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(sig, handler)


def _kernel_unavailable_reason(deployment: Deployment) -> str | None:
    """Why this deployment's link is not shaped in the kernel, or None when it can be."""
    link = deployment.link
    if link.shaping is LinkShaping.TOKEN_BUCKET:
        return "the deployment asks for the token bucket (link.shaping)"
    if deployment.backend is Backend.VLLM:
        return "vllm instances send from their engine's connector, paced by the token bucket"
    roles = {spec.role for spec in deployment.instances}
    if not {InstanceRole.PRFAAS_PREFILL, InstanceRole.PD_DECODE} <= roles:
        return "no PrfaaS prefill or no PD decode instance: nothing crosses the link"
    delay_s = link.rtt_ms / 2e3
    return linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(link.rate_gbps * 1e9, delay_s))
