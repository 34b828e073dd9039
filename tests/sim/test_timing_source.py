"""The simulator is timed by the scenario's timing source, the planner's (issue 30), and its
report names it."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.sim.api import simulate_scenario
from prfaas.specs import aic

DENSE_70B = Path(__file__).parent / "data" / "dense-70b.yaml"


def _scenario(tmp_path: Path, timing: str) -> Path:
    text = DENSE_70B.read_text().replace("chip: h20,", "chip: h200,")
    text += f"timing: {timing}\narrivals: {{process: poisson, rate_per_s: 1.0, num_requests: 40}}\n"
    path = tmp_path / "dense-70b-timed.yaml"
    path.write_text(text)
    return path


def test_the_default_source_is_reported(tmp_path: Path) -> None:
    report = simulate_scenario(str(_scenario(tmp_path, "{source: roofline}")), "prfaas").report
    assert report.to_json()["timing"] == {"prfaas": "roofline", "pd": "roofline"}


@pytest.mark.skipif(aic.aic_version() is None, reason="aiconfigurator-core not installed")
def test_aiconfigurator_times_the_simulated_instances(tmp_path: Path) -> None:
    path = _scenario(tmp_path, "{source: aic, engine: vllm}")
    run = simulate_scenario(str(path), "prfaas")
    timing = run.report.timing
    assert timing["prfaas"] == timing["pd"]
    assert timing["pd"].startswith(f"aiconfigurator {aic.aic_version()} (vllm ")
    profile = run.config.hardware.pd.profile
    assert profile.prefill_s(8192) < 1.0  # aiconfigurator's 70B TP8: ~0.33 s; the roofline ~1.2 s
