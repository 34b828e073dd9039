"""Catalog chips for aiconfigurator's systems (issue 30): each names its system, the new ones
are timed by their system's data, and one whose system has no data falls back with one line."""

from __future__ import annotations

import pytest
from aic_helpers import timed_at_8

from prfaas.specs import aic
from prfaas.specs.catalog import chip_names, get_chip, get_model
from shared_specs import needs_aic


@needs_aic
def test_every_catalog_chip_names_a_system_aiconfigurator_has() -> None:
    systems = {name: get_chip(name).aic_system for name in chip_names()}
    assert {s for s in systems.values() if s is not None} <= set(aic.aic_systems())
    # The systems an LLM fleet plans on each have a chip (before: the SXM H200, H100, B200, A100).
    assert {"gb200", "gb300", "b300_sxm", "l40s", "h100_pcie", "a100_pcie"} <= set(systems.values())
    assert systems["h20"] is None


@needs_aic
@pytest.mark.parametrize(
    ("chip", "system"),
    [("gb200", "gb200"), ("gb300", "gb300"), ("b300", "b300_sxm"), ("l40s", "l40s")],
)
def test_new_chips_are_timed_by_their_systems_data(chip: str, system: str) -> None:
    timed = timed_at_8(get_model("llama-3.1-70b"), chip)
    assert timed.fallback is None
    assert f"{system}, tp8)" in timed.profile.source


@needs_aic
def test_a_chip_whose_system_has_no_data_falls_back_with_one_line() -> None:
    timed = timed_at_8(get_model("llama-3.1-70b"), "h100-pcie")
    assert timed.fallback == (
        "timing: aiconfigurator (sglang) cannot time llama-3.1-70b on 8 x h100-pcie: it has no "
        "sglang data for h100_pcie; timed by the default (roofline) source instead"
    )
