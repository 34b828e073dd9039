"""The `prfaas.metrics/1` JSON schema, defined once: what `MetricsSummary.to_json` writes.

`prfaas simulate --json` (under `metrics`) and `prfaas bench --json` (under `metrics`) both
write this object; `validate_metrics` checks one (types, no missing or unknown keys, counts that
add up) and `metrics_json_schema()` is the JSON Schema for other tools:

    validate_metrics(json.loads(out)["metrics"])      # MetricsModel, or pydantic ValidationError
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_ID = "prfaas.metrics/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class DistributionModel(_Strict):
    """`Distribution`: mean and percentiles, all null for an empty sample."""

    count: int = Field(ge=0)
    mean: float | None
    median: float | None
    p90: float | None
    p99: float | None

    @model_validator(mode="after")
    def _empty_means_null(self) -> DistributionModel:
        values = (self.mean, self.median, self.p90, self.p99)
        if (self.count == 0) != all(v is None for v in values):
            raise ValueError("an empty distribution has null statistics, a non-empty one none")
        return self


class SloModel(_Strict):
    ttft_s: float | None = Field(gt=0)
    tpot_s: float | None = Field(gt=0)


class MetricsModel(_Strict):
    """`MetricsSummary.to_json()`: the one report of `prfaas simulate` and `prfaas bench`."""

    schema_id: Literal["prfaas.metrics/1"] = Field(alias="schema")
    num_requests: int = Field(ge=0)
    num_completed: int = Field(ge=0)
    num_failed: int = Field(ge=0)
    failures: dict[str, int]
    num_rejected: int = Field(ge=0)  # refused by admission control (429), not failures
    rejections: dict[str, int]
    duration_s: float = Field(ge=0)
    request_throughput_per_s: float = Field(ge=0)
    input_token_throughput_per_s: float = Field(ge=0)
    output_token_throughput_per_s: float = Field(ge=0)
    goodput_per_s: float | None = Field(ge=0)
    slo: SloModel | None
    ttft_s: DistributionModel
    tpot_s: DistributionModel
    itl_s: DistributionModel
    e2e_s: DistributionModel
    paths: dict[str, int]

    @model_validator(mode="after")
    def _counts_add_up(self) -> MetricsModel:
        if self.num_completed + self.num_failed + self.num_rejected != self.num_requests:
            raise ValueError("num_completed + num_failed + num_rejected != num_requests")
        if sum(self.failures.values()) != self.num_failed:
            raise ValueError("failures do not add up to num_failed")
        if sum(self.rejections.values()) != self.num_rejected:
            raise ValueError("rejections do not add up to num_rejected")
        if self.ttft_s.count != self.num_completed:
            raise ValueError("ttft_s.count != num_completed")
        if (self.goodput_per_s is None) != (self.slo is None):
            raise ValueError("goodput_per_s is given exactly when an slo is")
        return self


def validate_metrics(data: Any) -> MetricsModel:
    """The parsed `prfaas.metrics/1` object; pydantic's ValidationError when it is not one."""
    return MetricsModel.model_validate(data)


def metrics_json_schema() -> dict[str, Any]:
    """JSON Schema of `prfaas.metrics/1` (the keys as written, `schema` included)."""
    return MetricsModel.model_json_schema(by_alias=True)
