"""A deployment file's own chips (`chips:`, a scenario's schema and checks: specs.described_chips):
an emulated instance on one is timed by it, the router's shapes name the chip a name resolves
to, and a malformed section is refused with one line naming the field (issue 30 point 4). The
plan written on such a chip and brought up: tests/cli/test_plan_chips.py."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from prfaas.serve.backends.emulated import instance_profile
from prfaas.serve.config.deployment import Deployment, load_deployment
from prfaas.serve.errors import DeploymentError
from prfaas.serve.router.rebalance import instance_shape
from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.files import ChipFile
from prfaas.specs.timing import TimingChoice, time_instance
from shared_specs import H100_NVL, needs_aic


def _instance(name: str, role: str, chip: str) -> dict[str, Any]:
    return {"name": name, "role": role, "cluster": "pd", "backend": "emulated", "chip": chip}


def _file(
    tmp_path: Path, chips: dict[str, Any], decode_chip: str = "h100-nvl", prefill_chip: str = "h200"
) -> Path:
    body = {
        "model": "llama-3.1-70b",
        "chips": chips,
        "instances": [
            _instance("pdp-0", "pd-prefill", prefill_chip),
            _instance("pdd-0", "pd-decode", decode_chip),
        ],
    }
    path = tmp_path / "deploy.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def test_an_instance_on_a_described_chip_is_timed_by_it(tmp_path: Path) -> None:
    deployment = load_deployment(_file(tmp_path, {"H100-NVL": H100_NVL}, decode_chip="h100-NVL"))
    spec = deployment.instance("pdd-0")
    chip = deployment.chip_of(spec)
    assert chip == ChipFile.model_validate(H100_NVL).to_spec("h100-nvl")
    split = deployment.split_of(spec)
    assert split is not None
    profile = instance_profile(deployment, spec)
    expected = time_instance(get_model("llama-3.1-70b"), chip, split, TimingChoice()).profile
    assert profile.chip == chip
    assert profile.prefill_s(8192) == expected.prefill_s(8192)
    # the catalog's chips are as before
    assert deployment.chip_of(deployment.instance("pdp-0")) == get_chip("h200")


def test_two_spellings_of_one_chip_are_one_shape(tmp_path: Path) -> None:
    """A role flip compares the chip a name resolves to, not the name as written."""
    path = _file(tmp_path, {"h100-nvl": H100_NVL}, decode_chip="H100-NVL", prefill_chip="h100-nvl")
    deployment = load_deployment(path)
    shapes = {instance_shape(deployment, spec) for spec in deployment.instances}
    assert shapes == {"8 x h100-nvl tp8"}
    catalog = Deployment.model_validate(
        {"model": "llama-3.1-70b", "instances": [_instance("a", "pd-prefill", "H200")]}
    )
    assert instance_shape(catalog, catalog.instances[0]) == "8 x h200 tp8"


def _with(field: str, value: Any) -> dict[str, Any]:
    chip = copy.deepcopy(H100_NVL)
    if value is None:
        del chip[field]
    else:
        chip[field] = value
    return {"h100-nvl": chip}


@pytest.mark.parametrize(
    ("chips", "decode_chip", "message"),
    [
        (_with("hbm_gb", -1), "h100-nvl", "chips.h100-nvl.hbm_gb: Input should be greater than 0"),
        (_with("prefill_mfu", None), "h100-nvl", "chips.h100-nvl.prefill_mfu: Field required"),
        (_with("colour", "green"), "h100-nvl", "chips.h100-nvl.colour: Extra inputs are not"),
        (_with("aic_system", "H100 SXM"), "h100-nvl", "chips.h100-nvl.aic_system: String should"),
        (
            {"h200": H100_NVL},
            "h200",
            "chips.h200: the catalog has a chip 'h200'; name yours otherwise",
        ),
        (
            {"h100-nvl": H100_NVL, "H100-NVL": H100_NVL},
            "h100-nvl",
            "-nvl: another chip here has this name (names ignore case)",
        ),
        (
            {"h100-nvl": H100_NVL},
            "h100-pci",
            "instance pdd-0: chip: unknown chip 'h100-pci' (known: h200, ",
        ),
        ({}, "h100-nvl", "; or describe it under chips:"),
        ({}, "H100-NVL", "instance pdd-0: chip: unknown chip 'H100-NVL' (known: h200, "),
    ],
)
def test_a_malformed_chip_is_one_line_naming_the_field(
    tmp_path: Path, chips: dict[str, Any], decode_chip: str, message: str
) -> None:
    with pytest.raises(DeploymentError) as info:
        load_deployment(_file(tmp_path, chips, decode_chip))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@needs_aic
def test_an_aic_system_aiconfigurator_lacks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match=r"aic_system: 'h100_nvl' is not one of .*h100_sxm"):
        load_deployment(_file(tmp_path, _with("aic_system", "h100_nvl")))


def test_the_instances_on_one_unknown_chip_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError) as info:
        load_deployment(_file(tmp_path, {}, decode_chip="h100-nvl", prefill_chip="h100-nvl"))
    assert " instance pdp-0, pdd-0: chip: unknown chip 'h100-nvl' (known: h200, " in str(info.value)
    assert "\n" not in str(info.value)
