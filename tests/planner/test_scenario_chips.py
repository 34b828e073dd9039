"""A scenario's own chips (`chips:`, as chips.yaml describes one): used by its clusters, timed
by the chosen source through their `aic_system`, and refused with one line when malformed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from prfaas.planner import load_scenario
from prfaas.specs.errors import SpecFileError
from shared_specs import H100_NVL, needs_aic

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def _scenario(tmp_path: Path, chips: dict[str, Any], **extra: Any) -> str:
    body = yaml.safe_load(DENSE_70B.read_text())
    body["pd"]["chip"] = "H100-NVL"
    body["chips"] = chips
    body.update(extra)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_a_cluster_runs_on_a_chip_the_scenario_describes(tmp_path: Path) -> None:
    scenario = load_scenario(_scenario(tmp_path, {"h100-nvl": H100_NVL}))
    chip = scenario.hardware.pd.profile.chip
    assert (chip.name, chip.display_name, chip.hbm_bytes) == ("h100-nvl", "NVIDIA H100 NVL", 94e9)
    assert (chip.relative_price, chip.aic_system) == (1.9, "h100_sxm")
    assert scenario.hardware.prfaas.profile.chip.name == "h200"  # the catalog's, as before
    assert scenario.hardware.pd.profile.source == "roofline"


@needs_aic
def test_its_aic_system_times_it_under_aiconfigurator(tmp_path: Path) -> None:
    path = _scenario(tmp_path, {"h100-nvl": H100_NVL}, timing={"source": "aic"})
    profile = load_scenario(path).hardware.pd.profile
    assert "h100_sxm, tp8)" in profile.source


def _with(field: str, value: Any) -> dict[str, Any]:
    chip = copy.deepcopy(H100_NVL)
    if value is None:
        del chip[field]
    else:
        chip[field] = value
    return {"h100-nvl": chip}


@pytest.mark.parametrize(
    ("chips", "message"),
    [
        (_with("hbm_gb", -1), r"chips.h100-nvl.hbm_gb: Input should be greater than 0"),
        (_with("prefill_mfu", None), r"chips.h100-nvl.prefill_mfu: Field required"),
        (_with("aic_system", "H100 SXM"), r"chips.h100-nvl.aic_system: String should match"),
        (_with("colour", "green"), r"chips.h100-nvl.colour: Extra inputs are not permitted"),
        ({"h200": H100_NVL}, r"chips.h200: the catalog has a chip 'h200'; name yours otherwise"),
        (
            {"h100-nvl": H100_NVL, "H100-NVL": H100_NVL},
            r"chips\.(h100-nvl|H100-NVL): another chip here has this name \(names ignore case\)",
        ),
        ({"h100-sxm5": H100_NVL}, r"pd.chip: unknown chip 'H100-NVL' .*; or describe it under"),
    ],
)
def test_a_malformed_chip_fails_with_one_line_naming_the_field(
    tmp_path: Path, chips: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecFileError, match=message) as info:
        load_scenario(_scenario(tmp_path, chips))
    assert "\n" not in str(info.value)


@needs_aic
def test_an_aic_system_aiconfigurator_lacks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match=r"aic_system: 'h100_nvl' is not one of .*h100_sxm"):
        load_scenario(_scenario(tmp_path, _with("aic_system", "h100_nvl")))
