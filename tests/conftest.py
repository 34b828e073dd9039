"""Shared test helpers: where fixtures and the shared traces live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "fixtures"


@pytest.fixture
def hf_config_dir() -> Path:
    return FIXTURES / "hf_configs"
