"""Where a benchmark's figures came from: the commit (marked `+dirty` when the tree had
uncommitted edits) and the host. Every benchmark's JSON carries both, so a number recorded in
docs/benchmarks.md names what produced it."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def git_sha() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
        status = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        )  # fmt: skip
    except OSError:  # no git on this machine
        return "unknown"
    sha = head.stdout.strip() or "unknown"
    return sha + ("+dirty" if status.stdout.strip() else "")


def host() -> dict[str, Any]:
    return {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.system(),
    }


def emit(result: dict[str, Any], save: str | None) -> None:
    """Print a benchmark's JSON, and write the same text to `save` when given."""
    text = json.dumps(result, indent=2)
    print(text)
    if save:
        Path(save).write_text(text)
