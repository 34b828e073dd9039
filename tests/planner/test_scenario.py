"""Scenario files: the bundled case study, traces, and one-line errors naming the field."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from prfaas.planner import bundled_scenarios, load_scenario
from prfaas.specs.errors import SpecFileError


def bundled_body() -> dict[str, Any]:
    path = resources.files("prfaas.planner") / "data" / "scenarios" / "paper-case-study.yaml"
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    return body


def write(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_the_case_study_is_bundled_and_resolves() -> None:
    assert "paper-case-study" in bundled_scenarios()
    scenario = load_scenario("paper-case-study")
    hw = scenario.hardware
    assert (hw.prfaas.num_instances, hw.pd.num_instances, hw.link_gbps) == (4, 8, 100)
    assert (hw.prfaas.profile.chip.name, hw.pd.profile.chip.name) == ("h200", "h20")
    assert scenario.workload.mean_output_tokens == 1024
    assert scenario.workload.uncached_input.max_tokens == 131072  # "128K"
    assert scenario.threshold_step_tokens == 100


def edit(path: str, value: Any) -> dict[str, Any]:
    """The bundled body with `value` at the dotted `path` (None deletes the key)."""
    body = copy.deepcopy(bundled_body())
    *parents, leaf = path.split(".")
    node = body
    for key in parents:
        node = node[key]
    if value is None:
        del node[leaf]
    else:
        node[leaf] = value
    return body


LOGNORMAL = "workload.input.lognormal"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("link_gbps", None, r"scenario.yaml: link_gbps: Field required"),
        ("link_gbps", -5, r"link_gbps: Input should be greater than 0"),
        (f"{LOGNORMAL}.mu", 50.0, rf"{LOGNORMAL}.mu: .*out of range"),
        (f"{LOGNORMAL}.mu", -3.0, rf"{LOGNORMAL}.mu: .*out of range"),
        (f"{LOGNORMAL}.sigma", 0, rf"{LOGNORMAL}.sigma"),
        (f"{LOGNORMAL}.max_tokens", "12Q", rf"{LOGNORMAL}.max_tokens: .*malformed token count"),
        (f"{LOGNORMAL}.min_tokens", "256K", rf"{LOGNORMAL}.mu: .*min_tokens must be below"),
        ("prfaas.chip", "h900", r"prfaas.chip: unknown chip 'h900'"),
        ("pd.num_gpus", 60, r"pd.num_gpus: .*not whole instances of 8"),
        ("model", "gpt-17", r"model: unknown model 'gpt-17'"),
        ("decode.slo_tokens_per_s", 0, r"decode.slo_tokens_per_s"),
        ("threshold_step_tokens", 500, r"threshold_step_tokens"),
        ("colour", "blue", r"colour: Extra inputs are not permitted"),
        ("workload.output.lognormal", {"mu": 6, "sigma": 1, "min_tokens": 1, "max_tokens": 4096},
         r"workload.output: give exactly one of"),
        ("workload.output", None, r"workload: give either trace or both input and output"),
        ("workload.trace", {"path": "t.jsonl", "cache_capacity_blocks": 0},
         r"workload: give either trace or input \+ output"),
        ("workload.trace", {"path": "t.jsonl"}, r"workload.trace.cache_capacity_blocks: Field"),
    ],
)  # fmt: skip
def test_malformed_scenarios_fail_with_one_line_naming_the_field(
    tmp_path: Path, path: str, value: Any, message: str
) -> None:
    with pytest.raises(SpecFileError, match=message) as info:
        load_scenario(write(tmp_path, edit(path, value)))
    assert "\n" not in str(info.value)


def test_unknown_names_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match=r"unknown scenario 'nope'.*paper-case-study"):
        load_scenario("nope")
    with pytest.raises(SpecFileError, match="cannot read"):
        load_scenario(str(tmp_path / "absent.yaml"))
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SpecFileError, match="not valid YAML"):
        load_scenario(str(tmp_path / "bad.yaml"))


def test_a_trace_scenario_reads_its_trace_relative_to_the_file(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 5, "input_length": 1100, "output_length": 30, "hash_ids": [1, 2, 4]},
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    body = edit("workload", {"trace": {"path": "t.jsonl", "cache_capacity_blocks": None}})
    workload = load_scenario(write(tmp_path, body)).workload
    # Second request reuses blocks 1 and 2: 1,100 - 1,024 = 76 uncached tokens.
    assert workload.uncached_input.mean_tokens == (1100 + 76) / 2
    assert (workload.mean_input_tokens, workload.mean_output_tokens) == (1100, 20)
    assert workload.prefix_hit_fraction == pytest.approx(1024 / 2200)


def test_a_relative_model_path_starts_from_the_scenario_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "hf_configs"
    (tmp_path / "models").mkdir()
    config = (fixtures / "qwen3-235b.json").read_text()
    (tmp_path / "models" / "q.json").write_text(config)
    scenario = write(tmp_path, edit("model", "models/q.json"))
    monkeypatch.chdir(fixtures)  # elsewhere: the path must not resolve against the cwd
    hardware = load_scenario(scenario).hardware
    assert hardware.pd.profile.model.kv_bytes_per_token() == 192_512
