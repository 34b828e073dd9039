"""The time-scale sweep: every policy at every scale, offered rate from the scaled timestamps,
saturation as the largest completion rate seen."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_fixtures import write_scenario, write_trace

from prfaas.planner.scenario import read_scenario_file
from prfaas.sim.sweep import SweepRow, saturation, sweep_json, sweep_time_scales
from prfaas.specs.errors import SpecError


def _row(policy: str, scale: float, throughput: float) -> SweepRow:
    return SweepRow(scale, 1 / scale, policy, 10, throughput, None, None, None, None, None, 0.0)


def test_sweep_runs_every_policy_at_every_scale(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, num=80)
    path = write_scenario(
        tmp_path,
        workload={"trace": {"path": trace.name, "cache_capacity_blocks": None}},
        arrivals={"process": "trace", "time_scale": 1.0},
        simulation={"prefix_cache_gib": 512, "slo": {"ttft_s": 10}},
    )
    body, base = read_scenario_file(str(path))
    rows = sweep_time_scales(body, base, "x", [1.0, 0.5], ["homogeneous", "prfaas"])
    assert [(r.time_scale, r.policy) for r in rows] == [
        (1.0, "homogeneous"),
        (1.0, "prfaas"),
        (0.5, "homogeneous"),
        (0.5, "prfaas"),
    ]
    # 80 requests 0.4 s apart: 79 gaps of 0.4 s, halved at scale 0.5.
    assert rows[0].offered_per_s == pytest.approx(80 / (79 * 0.4))
    assert rows[2].offered_per_s == pytest.approx(2 * rows[0].offered_per_s)
    assert all(r.num_requests == 80 and r.num_in_slo is not None for r in rows)
    assert set(sweep_json(rows)["saturation"]) == {"homogeneous", "prfaas"}


def test_saturation_is_the_largest_completion_rate() -> None:
    rows = [_row("h", 0.8, 4.2), _row("h", 0.6, 5.6), _row("h", 0.5, 5.1), _row("p", 0.5, 6.8)]
    assert saturation(rows) == {"h": (5.6, 0.6), "p": (6.8, 0.5)}


def test_sweep_needs_a_trace(tmp_path: Path) -> None:
    body, base = read_scenario_file(str(write_scenario(tmp_path)))
    with pytest.raises(SpecError, match="trace"):
        sweep_time_scales(body, base, "x", [1.0], ["prfaas"])
