"""Shared test helpers: where fixtures and the shared traces live."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Tests assert behaviour, not speed: hypothesis's 200 ms deadline per example fails a property
# test on a loaded 2-core CI host (vLLM engines beside it) without any behaviour changing.
settings.register_profile("prfaas", deadline=None)
settings.load_profile("prfaas")

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture
def hf_config_dir() -> Path:
    return FIXTURES / "hf_configs"


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 KiB tmpfs: a real file system whose writes fail with ENOSPC past its size."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "full"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)
