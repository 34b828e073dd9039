"""Fixtures of the engine tests: the core presets, and the hybrid ones (shared helpers live in
engine_helpers.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from engine_helpers import CORE_NAMES, HYBRID_NAMES, preset

from prfaas.engine import LoadedModel


@pytest.fixture(params=CORE_NAMES)
def model(request: pytest.FixtureRequest) -> LoadedModel:
    return preset(request.param)


@pytest.fixture(params=HYBRID_NAMES)
def hybrid_model(request: pytest.FixtureRequest) -> LoadedModel:
    return preset(request.param)
