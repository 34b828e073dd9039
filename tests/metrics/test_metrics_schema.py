"""`prfaas.metrics/1`: one schema, and the simulator's JSON validates against it (the bench's
JSON: tests/bench/test_bench_schema.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner

from prfaas.cli.app import app
from prfaas.metrics import (
    SCHEMA_ID,
    RequestRecord,
    Slo,
    metrics_json_schema,
    summarize,
    validate_metrics,
)

runner = CliRunner()

SCENARIO = """
name: schema
model: prfaas-1t
prfaas: {chip: h200, num_gpus: 32, gpus_per_instance: 8}
pd: {chip: h20, num_gpus: 64, gpus_per_instance: 8}
link_gbps: 100
decode: {slo_tokens_per_s: 40}
workload:
  input: {lognormal: {mu: 9.9, sigma: 1.0, min_tokens: 128, max_tokens: 128K}}
  output: {fixed_tokens: 16}
arrivals: {process: poisson, rate_per_s: 2.0, num_requests: 40}
simulation: {slo: {ttft_s: 10}}
"""


def _summary_json(slo: Slo | None = None) -> dict[str, object]:
    records = [
        RequestRecord.from_token_times("a", 0.0, 10, [0.5, 0.6, 0.8], path="prfaas"),
        RequestRecord("b", 0.2, 10, error="http 503 (overloaded)"),
    ]
    return json.loads(json.dumps(summarize(records, slo).to_json()))


def test_simulator_json_validates(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    args = ["simulate", "-s", str(scenario), "--compare", "prfaas,naive", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for run in json.loads(result.stdout):
        metrics = validate_metrics(run["metrics"])
        assert metrics.num_requests == 40
        assert metrics.slo is not None and metrics.goodput_per_s is not None


def test_round_trip_and_json_schema() -> None:
    data = _summary_json(Slo(ttft_s=1.0))
    assert validate_metrics(data).model_dump(mode="json", by_alias=True) == data
    schema = metrics_json_schema()
    assert schema["properties"]["schema"]["const"] == SCHEMA_ID
    assert set(schema["required"]) == set(data)


@pytest.mark.parametrize(
    "change",
    [
        {"schema": "prfaas.metrics/2"},
        {"num_failed": 0},  # completed + failed != requests
        {"failures": {}},  # reasons do not add up
        {"num_rejected": 1},  # completed + failed + rejected != requests
        {"rejections": {"x": 1}},  # rejections do not add up
        {"goodput_per_s": 1.0},  # goodput without an SLO
        {"ttft_s": {"count": 0, "mean": 1.0, "median": None, "p90": None, "p99": None}},
        {"extra_key": 1},
        {"duration_s": "12"},  # strings are not numbers
    ],
)
def test_malformed_summaries_are_refused(change: dict[str, object]) -> None:
    data = _summary_json() | change
    with pytest.raises(pydantic.ValidationError):
        validate_metrics(data)


def test_missing_key_is_refused() -> None:
    data = _summary_json()
    del data["paths"]
    with pytest.raises(pydantic.ValidationError):
        validate_metrics(data)
