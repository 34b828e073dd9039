"""`prfaas up` supervises: a killed instance is restarted with backoff and used again, the
deployment keeps serving meanwhile, and a child that keeps dying ends `prfaas up` with exit
code 3 and nothing left behind. The restart budget's arithmetic is tested on its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from serve_helpers import emulated_deployment, emulated_instance

from prfaas.serve.config.deployment import (
    EmulationSpec,
    InstanceRole,
    RouterSpec,
    SupervisorSpec,
    free_port,
)
from prfaas.serve.launch.supervisor import EXIT_GAVE_UP, RestartBudget
from prfaas.transfer import linkemu

WAIT_S = 90.0  # bound on every wait below (no assertion on how long anything takes)


def test_backoff_doubles_to_its_cap_and_the_budget_is_per_window() -> None:
    budget = RestartBudget(
        SupervisorSpec(max_restarts=3, window_s=100.0, backoff_base_s=1.0, backoff_cap_s=3.0)
    )
    assert [budget.on_exit("a", t) for t in (0.0, 1.0, 2.0)] == [1.0, 2.0, 3.0]
    assert budget.on_exit("b", 2.5) == 1.0  # every child has its own budget
    assert budget.on_exit("a", 3.0) is None  # a 4th exit within 100 s: give up
    fresh = RestartBudget(SupervisorSpec(max_restarts=1, window_s=10.0))
    assert fresh.on_exit("a", 0.0) == 1.0
    assert fresh.on_exit("a", 20.0) == 1.0  # the first exit left the window
    assert fresh.on_exit("a", 25.0) is None
    never = RestartBudget(SupervisorSpec(max_restarts=0))
    assert never.on_exit("a", 0.0) is None


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _instance_pid(up_pid: int, name: str) -> int | None:
    for pid in _descendants(up_pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--name" in argv and argv[argv.index(b"--name") + 1] == name.encode():
            return pid
    return None


def _netns() -> set[str]:
    try:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _wait(what: str, ok: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = ok()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")


class Up:
    """`prfaas up FILE` as a child process, its URL and admin token read from its output."""

    def __init__(self, path: Path, *, wait_serving: bool = True) -> None:
        env = dict(os.environ, PRFAAS_ADMIN_TOKEN="supervisor-test-admin-token")
        env.pop("PRFAAS_TRANSFER_SECRET", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prfaas", "up", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            process_group=0,  # as in a terminal: Ctrl-C goes to this group (`ctrl_c`)
        )
        self.seen_pids: set[int] = set()
        if not wait_serving:
            return
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # blocks until "serving" (or exit: "")
        assert line.startswith("prfaas: serving prfaas-1t at "), line
        self.url = line.split(" at ")[1].strip().removesuffix("/v1")
        self.headers = {"Authorization": "Bearer supervisor-test-admin-token"}

    def ctrl_c(self) -> None:
        """SIGINT to the terminal's foreground group, as Ctrl-C sends it."""
        os.killpg(self.process.pid, signal.SIGINT)

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(
            self.url + "/admin/state", headers=self.headers, timeout=30
        ).json()
        return result

    def netns(self) -> set[str]:
        """The namespaces of this deployment's kernel-shaped link (none: token bucket)."""
        shown = self.state()["link"]["netns"]
        return set() if shown is None else {shown["sender_netns"], shown["receiver_netns"]}

    def instance(self, name: str) -> dict[str, Any]:
        return next(i for i in self.state()["instances"] if i["name"] == name)

    def pid_of(self, name: str) -> int:
        pid = _wait(f"{name} running", lambda: _instance_pid(self.process.pid, name))
        self.seen_pids |= _descendants(self.process.pid)
        return int(pid)

    def complete(self, prompt: str) -> dict[str, Any]:
        body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4}
        response = httpx.post(self.url + "/v1/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


def _deployment_file(
    tmp_path: Path, *, backoff_base_s: float = 0.5, request_timeout_s: float = 120.0
) -> Path:
    deployment = emulated_deployment(
        router=RouterSpec(port=free_port(), request_timeout_s=request_timeout_s),
        emulation=EmulationSpec(time_factor=0.2, byte_factor=1 / 4096),
        supervisor=SupervisorSpec(
            max_restarts=2,
            window_s=600.0,
            backoff_base_s=backoff_base_s,
            backoff_cap_s=max(2.0, backoff_base_s),
            start_timeout_s=300.0,
        ),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
            emulated_instance("pdd-1", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(deployment.model_dump(mode="json", exclude_defaults=True)))
    return path


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    started = Up(_deployment_file(tmp_path))
    try:
        yield started
    finally:
        if started.process.poll() is None:
            started.process.send_signal(signal.SIGTERM)
            started.process.wait(timeout=60)


@pytest.mark.e2e
def test_a_killed_instance_comes_back_and_too_many_deaths_end_up_with_code_3(up: Up) -> None:
    ours = up.netns()
    assert ours <= _netns()
    pid = up.pid_of("pdd-0")
    stream_body = {"model": "prfaas-1t", "prompt": "mid-stream " * 4, "max_tokens": 4000}
    stream_body["stream"] = True
    with httpx.stream("POST", up.url + "/v1/completions", json=stream_body, timeout=120) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: "))  # the stream has started
        victim = up.state()["recent_decisions"][-1]["decode_instance"]
        pid = up.pid_of(victim)
        os.kill(pid, signal.SIGKILL)
        rest = [line for line in lines if line.startswith("data: ")]
    # the request in flight fails clearly: an error event, then [DONE]
    assert rest[-1] == "data: [DONE]" and '"error"' in rest[-2]
    # the deployment keeps serving while the instance is down (the other decode instance)
    assert up.complete("served while one decode instance is down")["choices"][0]["text"]

    def back() -> bool:
        shown = up.instance(victim)
        return bool(shown["healthy"] and shown["restarts"] == 1)

    _wait(f"{victim} restarted and healthy", back)
    assert (
        f'prfaas:instance_restarts{{instance="{victim}"}} 1.0'
        in httpx.get(up.url + "/metrics", timeout=30).text
    )
    # and it is used again: requests go to it (a fresh transfer session to its new process)
    used = _wait(
        f"a request decoded on {victim} again",
        lambda: up.complete(f"again {time.monotonic()}")["prfaas"]["decode_instance"] == victim,
    )
    assert used
    # two more deaths use up the budget (2 restarts within the window): the third ends it all
    new_pid = up.pid_of(victim)
    assert new_pid != pid
    os.kill(new_pid, signal.SIGKILL)
    third = _wait("a second restart", lambda: (p := up.pid_of(victim)) != new_pid and p)
    os.kill(third, signal.SIGKILL)
    assert up.process.wait(timeout=WAIT_S) == EXIT_GAVE_UP
    assert up.process.stderr is not None
    err = up.process.stderr.read()
    assert f"{victim} exited (code -9) more than 2 times within 600 s; giving up" in err
    assert f"prfaas: {victim} is back, " in err  # each return has its line
    assert not any(_alive(p) for p in up.seen_pids)
    assert not ours & _netns()


@pytest.mark.e2e
def test_a_killed_router_comes_back_and_sigterm_stops_everything_with_code_0(up: Up) -> None:
    ours = up.netns()
    assert ours <= _netns()
    router = next(
        pid
        for pid in _descendants(up.process.pid)
        if b"router" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    )
    up.pid_of("pdd-0")  # records every child
    os.kill(router, signal.SIGKILL)

    def serving_again() -> bool:
        try:
            return bool(httpx.get(up.url + "/health", timeout=5).json()["status"] == "ok")
        except (httpx.HTTPError, ValueError):
            return False

    _wait("the router restarted and every instance registered", serving_again)
    assert up.complete("served by the restarted router")["choices"][0]["text"]
    up.seen_pids |= _descendants(up.process.pid)
    up.process.send_signal(signal.SIGTERM)
    assert up.process.wait(timeout=WAIT_S) == 0
    assert not any(_alive(p) for p in up.seen_pids)
    assert not ours & _netns()


@pytest.mark.e2e
def test_ctrl_c_during_a_restart_stops_everything_cleanly(up: Up) -> None:
    pid = up.pid_of("pdd-0")
    os.kill(pid, signal.SIGKILL)
    _wait("pdd-0 restarting", lambda: up.pid_of("pdd-0") != pid)
    up.seen_pids |= _descendants(up.process.pid)
    up.ctrl_c()  # while the new pdd-0 starts
    assert up.process.wait(timeout=WAIT_S) == 0
    assert up.process.stderr is not None
    err = up.process.stderr.read()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "prfaas: every process stopped" in err
    assert not any(_alive(p) for p in up.seen_pids)


def _stop(up: Up) -> None:
    """SIGTERM (so a failed test leaves no namespaces behind), SIGKILL if it hangs."""
    if up.process.poll() is None:
        up.process.send_signal(signal.SIGTERM)
        try:
            up.process.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            up.process.kill()


def _link_namespaces_of(up_pid: int) -> set[str]:
    """The link's namespaces, from the deployment file the launcher wrote for its children
    (it writes it after it built them), once a child runs."""
    for pid in _descendants(up_pid):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"instance" in argv:
            written = yaml.safe_load(Path(argv[argv.index(b"instance") + 1].decode()).read_text())
            netns = written["link"]["netns"]
            return {netns["sender_netns"], netns["receiver_netns"]}
    return set()


@pytest.mark.e2e
@pytest.mark.skipif(
    linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(1e9, 0.01)) is not None,
    reason=str(linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(1e9, 0.01))),
)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_before_the_serving_line_removes_the_namespaces(
    tmp_path: Path, stop: signal.Signals
) -> None:
    up = Up(_deployment_file(tmp_path), wait_serving=False)
    try:
        ours = _wait(
            "the link built and a child started", lambda: _link_namespaces_of(up.process.pid)
        )
        assert ours <= _netns()
        up.seen_pids |= _descendants(up.process.pid)
        up.process.send_signal(stop)
        code = up.process.wait(timeout=WAIT_S)
    finally:
        _stop(up)
    assert up.process.stdout is not None and up.process.stderr is not None
    err = up.process.stderr.read()
    assert code == 0, err
    assert "serving" not in up.process.stdout.read()  # it was stopped while starting
    assert "prfaas: stopped before serving; every process stopped" in err
    assert not ours & _netns()
    assert not any(_alive(p) for p in up.seen_pids)


def _delay_line_pid(up_pid: int) -> int | None:
    for pid in _descendants(up_pid):
        with contextlib.suppress(OSError):
            if b"prfaas.transfer.delayline" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
    return None


def _health(up: Up) -> dict[str, Any]:
    try:
        result: dict[str, Any] = httpx.get(up.url + "/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return result


@pytest.mark.e2e
@pytest.mark.skipif(
    linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(1e9, 0.01)) is not None,
    reason=str(linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(1e9, 0.01))),
)
def test_a_killed_delay_line_sends_long_prompts_to_pd_p_until_it_is_restarted(
    tmp_path: Path,
) -> None:
    """The link is down while its delay line is (a 4 s backoff keeps it down long enough to
    see): long prompts go to PD-P at once, not after a request timeout (set to 20 s here,
    so a prompt stuck on the cut link would fail the path assertion after the restart too)."""
    up = Up(_deployment_file(tmp_path, backoff_base_s=4.0, request_timeout_s=20.0))
    long_prompt = "a long prompt over the link " * 60

    def path_of(tag: str) -> str:
        return str(up.complete(f"{tag} {long_prompt}")["prfaas"]["path"])

    try:
        assert path_of("before") == "prfaas"
        line = _wait("the delay line running", lambda: _delay_line_pid(up.process.pid))
        os.kill(line, signal.SIGKILL)
        down = _wait("the link shown down", lambda: _health(up).get("link") == "down")
        assert down and _health(up)["status"] == "degraded"
        assert path_of("while down") == "pd-p"
        _wait("the link back", lambda: _health(up) == {"status": "ok", "healthy": 4})
        assert _delay_line_pid(up.process.pid) not in (None, line)
        assert path_of("after") == "prfaas"  # the restarted line carries the KV again
        up.process.send_signal(signal.SIGTERM)
        assert up.process.wait(timeout=WAIT_S) == 0
    finally:
        _stop(up)
    assert up.process.stderr is not None
    err = up.process.stderr.read()
    assert "prfaas: link-delay-line exited (code -9); restarting in 4 s" in err
    assert "prfaas: link-delay-line is back, " in err
