"""Fixtures of the engine tests: every preset, and the hybrid ones (shared helpers live in
engine_helpers.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from engine_helpers import HYBRID_NAMES, PRESET_NAMES, preset

from prfaas.engine import LoadedModel


@pytest.fixture(params=PRESET_NAMES)
def model(request: pytest.FixtureRequest) -> LoadedModel:
    return preset(request.param)


@pytest.fixture(params=HYBRID_NAMES)
def hybrid_model(request: pytest.FixtureRequest) -> LoadedModel:
    return preset(request.param)
