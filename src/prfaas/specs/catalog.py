"""The catalog shipped inside the package: models (data/models/*.yaml), chips (data/chips.yaml),
measured profiles (data/profiles.yaml) and the paper's published Phi_kv values (data/paper.yaml).

Files are read once per process. `profile_for` is the one place that decides whether an instance
is timed from measurements or from the roofline: measured wins when the catalog has it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from prfaas.specs.chip import ChipSpec
from prfaas.specs.errors import UnknownChipError, UnknownModelError
from prfaas.specs.files import (
    ChipFile,
    ModelFile,
    PaperPhi,
    ProfileFile,
    load_model_file,
    read_yaml,
    validate,
)
from prfaas.specs.hf_config import load_hf_config
from prfaas.specs.model import ModelSpec
from prfaas.specs.perf import MeasuredCurve, MeasuredProfile, PerfProfile, RooflineProfile

MIB = 2**20


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """A catalog model: its spec plus provenance."""

    spec: ModelSpec
    display_name: str
    hf_id: str
    sources: dict[str, str]
    card_total_params: float | None
    card_active_params: float | None

    @classmethod
    def from_file(cls, parsed: ModelFile, spec: ModelSpec) -> CatalogModel:
        card = parsed.card_params
        return cls(
            spec=spec,
            display_name=parsed.display_name or parsed.name,
            hf_id=parsed.hf_id,
            sources=dict(parsed.sources),
            card_total_params=card.total if card else None,
            card_active_params=card.active if card else None,
        )


def _data_dir() -> Path:
    return Path(str(resources.files("prfaas.specs") / "data"))


@cache
def _models() -> dict[str, CatalogModel]:
    models: dict[str, CatalogModel] = {}
    for path in sorted((_data_dir() / "models").glob("*.yaml")):
        parsed, spec = load_model_file(path)
        models[spec.name] = CatalogModel.from_file(parsed, spec)
    return models


@cache
def _chips() -> dict[str, ChipSpec]:
    raw = read_yaml(_data_dir() / "chips.yaml")
    return {
        name: validate(ChipFile, body, f"chips.yaml: {name}").to_spec(name)
        for name, body in raw["chips"].items()
    }


@cache
def _profiles() -> tuple[ProfileFile, ...]:
    raw = read_yaml(_data_dir() / "profiles.yaml")
    return tuple(
        validate(ProfileFile, body, f"profiles.yaml: [{i}]")
        for i, body in enumerate(raw["profiles"])
    )


@cache
def _paper_phi() -> tuple[PaperPhi, ...]:
    raw = read_yaml(_data_dir() / "paper.yaml")
    return tuple(
        validate(PaperPhi, body, f"paper.yaml: [{i}]") for i, body in enumerate(raw["phi_kv"])
    )


def model_names() -> list[str]:
    return list(_models())


def chip_names() -> list[str]:
    return list(_chips())


def catalog_model(name: str) -> CatalogModel:
    try:
        return _models()[name]
    except KeyError:
        known = ", ".join(_models())
        raise UnknownModelError(f"unknown model {name!r} (known: {known})") from None


def get_model(name: str) -> ModelSpec:
    return catalog_model(name).spec


def resolve_model(ref: str) -> ModelSpec:
    """A catalog name, a model YAML of ours, or a Hugging Face config.json / checkpoint dir."""
    path = Path(ref)
    if path.suffix in {".yaml", ".yml"}:
        return load_model_file(path)[1]
    if path.suffix == ".json" or path.is_dir():
        return load_hf_config(path)
    return get_model(ref)


def get_chip(name: str) -> ChipSpec:
    try:
        return _chips()[name.lower()]
    except KeyError:
        known = ", ".join(_chips())
        raise UnknownChipError(f"unknown chip {name!r} (known: {known})") from None


def measured_profile(
    model: ModelSpec, chip: ChipSpec, gpus_per_instance: int
) -> MeasuredProfile | None:
    """The catalog's measured profile of this exact deployment, or None when it has none."""
    for entry in _profiles():
        if (entry.model, entry.chip, entry.gpus_per_instance) == (
            model.name,
            chip.name,
            gpus_per_instance,
        ):
            lengths = [p.length_tokens for p in entry.points]
            prefill = MeasuredCurve.fit(lengths, [p.prefill_s for p in entry.points])
            sizes = [p.cache_mib for p in entry.points]
            cache_curve = None
            if all(s is not None for s in sizes):
                cache_curve = MeasuredCurve.fit(lengths, [s * MIB for s in sizes if s is not None])
            return MeasuredProfile(
                model, chip, gpus_per_instance, prefill, cache_curve, entry.reference
            )
    return None


def profile_for(model: ModelSpec, chip: ChipSpec, gpus_per_instance: int) -> PerfProfile:
    """Measured profile of this exact deployment if the catalog has one, else the roofline."""
    measured = measured_profile(model, chip, gpus_per_instance)
    return measured or RooflineProfile(model, chip, gpus_per_instance)


def paper_phi_gbps(
    model: str, chip: str, gpus_per_instance: int, length_tokens: int
) -> tuple[float, str] | None:
    """The paper's measured Phi_kv for this deployment and length, with the table it is from."""
    for row in _paper_phi():
        if (row.model, row.chip, row.gpus_per_instance) == (model, chip, gpus_per_instance):
            value = row.phi_gbps.get(length_tokens)
            return None if value is None else (value, row.table)
    return None


def paper_rows() -> tuple[PaperPhi, ...]:
    return _paper_phi()
