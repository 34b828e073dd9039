"""Our own YAML formats for models, chips and measured profiles, validated into specs.

A model file names its layer groups by `type` (gqa, swa, mla, linear for mixers; dense, moe for
MLPs); each group's keys are exactly the fields of the matching dataclass in `model`, so there is
one definition of every field. Validation errors become one-line `SpecFileError`s that name the
file and the offending key.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from prfaas.specs.chip import ChipSpec, RooflineCalibration
from prfaas.specs.errors import SpecFileError
from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    MixerGroup,
    MlaAttention,
    MlpGroup,
    ModelSpec,
    MoeMlp,
    SlidingWindowAttention,
)

MIXER_TYPES: dict[str, type[MixerGroup]] = {
    "gqa": GqaAttention,
    "swa": SlidingWindowAttention,
    "mla": MlaAttention,
    "linear": LinearAttention,
}
MLP_TYPES: dict[str, type[MlpGroup]] = {"dense": DenseMlp, "moe": MoeMlp}

T = TypeVar("T")


def one_line(error: ValidationError) -> str:
    """The first validation problem, as `key.path: message`."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(root)"
    return f"{where}: {first['msg']}" + (
        f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    )


def _build_group(table: dict[str, type[T]], raw: Any, where: str) -> T:
    if not isinstance(raw, dict) or "type" not in raw:
        raise SpecFileError(f"{where}: each group needs a 'type' ({', '.join(table)})")
    cls = table.get(raw["type"])
    if cls is None:
        raise SpecFileError(f"{where}: unknown type {raw['type']!r} (use {', '.join(table)})")
    body = {k: v for k, v in raw.items() if k != "type"}
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(body) - known)
    if unknown:
        raise SpecFileError(f"{where}: unknown key(s) {', '.join(unknown)} for {raw['type']}")
    try:
        group = TypeAdapter(cls).validate_python(body, strict=False)
    except ValidationError as err:
        raise SpecFileError(f"{where}: {one_line(err)}") from None
    for key, value in body.items():
        if isinstance(value, int | float) and value < 0:
            raise SpecFileError(f"{where}: {key} must not be negative")
    if getattr(group, "num_layers", 0) < 1:
        raise SpecFileError(f"{where}: num_layers must be at least 1")
    return group


class CardParams(BaseModel):
    """Parameter counts as the model card states them, kept to cross-check our arithmetic."""

    model_config = ConfigDict(extra="forbid")
    total: float = Field(gt=0)
    active: float = Field(gt=0)


class ModelFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    display_name: str = ""
    hf_id: str = ""
    sources: dict[str, str] = Field(default_factory=dict)
    card_params: CardParams | None = None
    hidden_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    weight_dtype_bytes: int = Field(default=2, gt=0)
    mixers: list[dict[str, Any]] = Field(min_length=1)
    mlps: list[dict[str, Any]] = Field(min_length=1)

    def to_spec(self, where: str) -> ModelSpec:
        mixers = tuple(
            _build_group(MIXER_TYPES, raw, f"{where}: mixers[{i}]")
            for i, raw in enumerate(self.mixers)
        )
        mlps = tuple(
            _build_group(MLP_TYPES, raw, f"{where}: mlps[{i}]") for i, raw in enumerate(self.mlps)
        )
        try:
            return ModelSpec(
                name=self.name,
                hidden_size=self.hidden_size,
                vocab_size=self.vocab_size,
                mixers=mixers,
                mlps=mlps,
                tie_word_embeddings=self.tie_word_embeddings,
                weight_dtype_bytes=self.weight_dtype_bytes,
            )
        except ValueError as err:
            raise SpecFileError(f"{where}: {err}") from None


class ChipFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    display_name: str
    dense_bf16_tflops: float = Field(gt=0)
    hbm_gb: float = Field(gt=0)
    hbm_tb_per_s: float = Field(gt=0)
    relative_price: float = Field(gt=0)
    attention_efficiency: float = Field(gt=0, le=1)
    prefill_mfu: float = Field(gt=0, le=1)
    prefill_overhead_s: float = Field(ge=0)
    decode_mbu: float = Field(gt=0, le=1)
    decode_overhead_s: float = Field(ge=0)
    aic_system: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    sources: dict[str, str] = Field(default_factory=dict)

    def to_spec(self, name: str) -> ChipSpec:
        return ChipSpec(
            name=name,
            display_name=self.display_name,
            dense_bf16_flops=self.dense_bf16_tflops * 1e12,
            hbm_bytes=int(self.hbm_gb * 1e9),
            hbm_bytes_per_s=self.hbm_tb_per_s * 1e12,
            relative_price=self.relative_price,
            calibration=RooflineCalibration(
                attention_efficiency=self.attention_efficiency,
                prefill_mfu=self.prefill_mfu,
                prefill_overhead_s=self.prefill_overhead_s,
                decode_mbu=self.decode_mbu,
                decode_overhead_s=self.decode_overhead_s,
            ),
            aic_system=self.aic_system,
        )


class MeasuredPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    length_tokens: int = Field(gt=0)
    prefill_s: float = Field(gt=0)
    cache_mib: float | None = Field(default=None, gt=0)


class ProfileFile(BaseModel):
    """Measured prefill timings (and optionally cache sizes) of one model on one deployment."""

    model_config = ConfigDict(extra="forbid")
    model: str
    chip: str
    gpus_per_instance: int = Field(gt=0)
    reference: str
    points: list[MeasuredPoint] = Field(min_length=3)


class PaperPhi(BaseModel):
    """A row of measured Phi_kv values (Gbps) published in the paper, keyed by length."""

    model_config = ConfigDict(extra="forbid")
    model: str
    chip: str
    gpus_per_instance: int
    table: str
    phi_gbps: dict[int, float]


def read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as err:
        raise SpecFileError(f"{path}: cannot read ({err.strerror})") from None
    except yaml.YAMLError as err:
        raise SpecFileError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None


def validate(cls: type[BaseModel], raw: Any, where: str) -> Any:
    try:
        return cls.model_validate(raw)
    except ValidationError as err:
        raise SpecFileError(f"{where}: {one_line(err)}") from None


def load_model_file(path: Path) -> tuple[ModelFile, ModelSpec]:
    """Read one model YAML; returns the validated file (for its sources) and the spec."""
    parsed: ModelFile = validate(ModelFile, read_yaml(path), str(path))
    return parsed, parsed.to_spec(str(path))
