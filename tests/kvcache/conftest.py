"""Fixtures of the kvcache tests (helpers live in kvcache_fixtures.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces"


@pytest.fixture
def shared_trace() -> Path:
    """The Mooncake conversation trace kept beside the repository (never committed)."""
    path = SHARED_TRACE / "mooncake_conversation_trace.jsonl"
    if not path.exists():
        pytest.skip(f"shared trace not present at {path}")
    return path
