"""Where a managed engine child's output goes: one log file per instance, not the terminal.

`vllm serve` prints about 350 lines while it starts (per instance, through `prfaas up`'s
terminal); they go to `<log_dir>/<instance>.log` instead, appended across restarts, and the
operator is told where in one line: `prfaas up` makes a fresh `log_dir` for the run and
prints it, an instance started by hand (`vllm.log_dir` unset) writes under the system temp
directory and prints its own file. When the child dies, `exit_report` quotes the file's last
lines, so the reason is on the terminal without opening the log.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

TAIL_LINES = 5
DEFAULT_DIR_NAME = "prfaas-engine-logs"


def log_path(log_dir: str | None, instance: str) -> Path:
    """The file instance `instance`'s engine writes to (its directory made)."""
    directory = Path(log_dir) if log_dir else Path(tempfile.gettempdir()) / DEFAULT_DIR_NAME
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{instance}.log"


def spawn_logged(
    argv: Sequence[str],
    path: Path,
    *,
    env: dict[str, str],
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen[bytes]:
    """`argv` started in a session of its own, stdout and stderr appended to `path`."""
    with path.open("ab") as log:  # the child holds its own copy of the descriptor
        return subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec_fn,  # noqa: PLW1509
            start_new_session=True,  # its engine processes share its group: stop kills all
        )


def exit_report(what: str, returncode: int, path: Path) -> str:
    """`what` exited: its code, its log file and the file's last lines."""
    try:
        with path.open(errors="replace") as log:
            tail = [line.rstrip() for line in deque(log, maxlen=TAIL_LINES)]
    except OSError:
        tail = []
    last = " | ".join(line for line in tail if line)
    return f"{what} exited with code {returncode} (log: {path}){': ' + last if last else ''}"
