"""Shared test helpers: where fixtures and the shared traces live."""

from __future__ import annotations

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
