"""A stop signal while `prfaas up` starts: caught, it exits 0 whatever code it interrupted;
recorded, it stops even where its exception was lost (serve.launch.stopping)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest

from prfaas.serve.launch import stopping
from prfaas.serve.launch.startup import wait_with_progress
from prfaas.serve.launch.stopping import StopRequested


def _exit_code_after_a_caught_stop(interrupted_code: str, stop: signal.Signals) -> int:
    """Run a process that installs the stop handlers, receives `stop` while it runs
    `interrupted_code` (which must send it), catches the stop and ends normally (not by
    `sys.exit`: under `-c` that exits at once, before CPython looks at its flag)."""
    program = textwrap.dedent(
        f"""
        import os, signal, sys
        from prfaas.serve.launch.stopping import stop_on_signals
        stop_on_signals()
        stopped = False
        try:
            {interrupted_code}
        except KeyboardInterrupt:
            stopped = True
        if not stopped:
            sys.exit(1)
        """
    )
    env = dict(os.environ, STOP=str(int(stop)))
    argv = [sys.executable, "-c", program]
    return subprocess.run(argv, check=False, env=env, timeout=60).returncode


# exec of a string is what a lazy import runs when it makes a dataclass or a namedtuple: a
# plain KeyboardInterrupt passing through it made CPython kill the process with SIGINT at exit
THROUGH_EXEC = (
    "exec(\"import os, signal\\nos.kill(os.getpid(), int(os.environ['STOP']))\\n"
    'for _ in range(100): pass\\n")'
)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_caught_after_it_came_through_exec_ends_the_process_normally(
    stop: signal.Signals,
) -> None:
    assert _exit_code_after_a_caught_stop(THROUGH_EXEC, stop) == 0


def test_the_stop_names_its_signal() -> None:
    stop = StopRequested(signal.SIGTERM)
    assert isinstance(stop, KeyboardInterrupt)
    assert type(stop) is not KeyboardInterrupt  # CPython's exit flag is for the exact type
    assert stop.signum == signal.SIGTERM and str(stop) == "SIGTERM"


def test_a_recorded_stop_is_raised_again_where_start_up_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop whose exception was swallowed (printed by a __del__, say) still ends the wait
    for the instances: `wait_with_progress` raises it before polling anything."""
    monkeypatch.setattr(stopping, "_requested", [signal.SIGINT])
    polled: list[str] = []

    def never(*_: Any, **__: Any) -> None:
        polled.append("get")
        raise AssertionError("polled after a stop")

    monkeypatch.setattr("httpx.get", never)
    spec = SimpleNamespace(name="p0", url="http://127.0.0.1:9", role=None, backend=None)
    launcher: Any = SimpleNamespace(
        deployment=SimpleNamespace(instances=[spec]),
        children={},
        instance_auth=lambda: None,
    )
    with pytest.raises(StopRequested) as raised:
        wait_with_progress(launcher, timeout_s=5.0)
    assert raised.value.signum == signal.SIGINT and not polled


def test_without_a_stop_nothing_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stopping, "_requested", [])
    stopping.raise_if_requested()
