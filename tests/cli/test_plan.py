"""`prfaas plan` end to end: the real command in a subprocess (JSON, table, plots, errors)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def prfaas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prfaas", *args], capture_output=True, text=True, check=False
    )


def test_json_reproduces_the_case_study_layout() -> None:
    result = prfaas("plan", "--scenario", "paper-case-study", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert list(report) == [
        "prfaas_pd",
        "homogeneous_pd",
        "naive_heterogeneous",
        "equal_cost_homogeneous",
        "decode",
        "warnings",
        "timing",
    ]
    best = report["prfaas_pd"]
    assert (best["n_prfaas"], best["n_p"], best["n_d"]) == (4, 3, 5)
    assert best["threshold_tokens"] == pytest.approx(19_400, rel=0.03)
    assert best["lambda_max"] == pytest.approx(3.24, rel=0.03)
    assert report["homogeneous_pd"]["ratio_to_homogeneous"] == 1.0


def test_table_and_plots(tmp_path: Path) -> None:
    result = prfaas("plan", "--plot-dir", str(tmp_path / "plots"))
    assert result.returncode == 0, result.stderr
    assert "PrfaaS-PD" in result.stdout and "Lambda_max" in result.stdout
    assert "BS_max 20" in result.stdout
    for name in ("fig5a-lambda-vs-np.png", "fig5b-bounds-vs-t.png"):
        png = (tmp_path / "plots" / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_a_ttft_objective_only_prfaas_pd_meets_plans_with_the_baselines_at_zero(
    tmp_path: Path,
) -> None:
    """The case study with `prefill: {ttft_slo_s: 3}`: H20 alone cannot meet it, PrfaaS-PD can;
    the table shows the baselines at 0 and `-` for the ratios instead of refusing the plan."""
    scenario = tmp_path / "slo.yaml"
    bundled = Path(__file__).parents[2] / "src/prfaas/planner/data/scenarios/paper-case-study.yaml"
    scenario.write_text(bundled.read_text() + "prefill: {ttft_slo_s: 3}\n")
    result = prfaas("plan", "--scenario", str(scenario))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "vs homogeneous" in line)
    assert [cell.strip() for cell in row.split("│")[2:6]] == ["-"] * 4


def test_a_trace_with_a_prefix_cache_lowers_the_threshold(tmp_path: Path) -> None:
    # Each conversation re-sends its history: with a cache only the new turn is uncached.
    rows = []
    for conversation in range(40):
        history: list[int] = []
        for turn in range(6):
            history = history + [conversation * 1000 + turn * 10 + b for b in range(8)]
            rows.append(
                {
                    "timestamp": turn * 1000 + conversation,
                    "input_length": len(history) * 512,
                    "output_length": 300,
                    "hash_ids": history,
                }
            )
    trace = tmp_path / "conversations.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    thresholds = {}
    for blocks in ("0", "unbounded"):
        result = prfaas(
            "plan", "--trace", str(trace), "--cache-blocks", blocks, "--no-pool-aware", "--json"
        )
        assert result.returncode == 0, result.stderr
        thresholds[blocks] = json.loads(result.stdout)["prfaas_pd"]["threshold_tokens"]
    assert thresholds["unbounded"] < thresholds["0"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--cache-blocks", "10", "--no-pool-aware"], "--cache-blocks applies to a trace"),
        (
            ["--trace", "t.jsonl", "--cache-blocks", "lots", "--no-pool-aware"],
            "--cache-blocks: 'lots'",
        ),
        (["--trace", "t.jsonl", "--cache-blocks", "10"], "add --no-pool-aware"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = prfaas("plan", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("prfaas: error: ") and message in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_malformed_scenario_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nmodel: prfaas-1t\nlink_gbps: -1\n")
    result = prfaas("plan", "--scenario", str(path))
    assert result.returncode == 2
    assert "bad.yaml: prfaas: Field required" in result.stderr
