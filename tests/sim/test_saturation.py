"""Saturation with its noise (issue 27): per-seed maxima, their mean and a 95% t-interval."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.planner.scenario import read_scenario_file
from prfaas.sim.saturation import SaturationEstimate, seeded_saturation, t_975
from prfaas.specs.errors import SpecError


def test_t_quantiles_match_the_table_and_approach_the_normal() -> None:
    assert t_975(4) == 2.776
    assert t_975(10) == pytest.approx(2.228, abs=0.005)
    assert t_975(30) == pytest.approx(2.042, abs=0.005)
    assert t_975(10_000) == pytest.approx(1.960, abs=0.001)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.1, 100.0), min_size=2, max_size=12))
def test_the_interval_holds_the_mean_and_widens_with_the_spread(samples: list[float]) -> None:
    est = SaturationEstimate.of(samples, 1.0)
    assert est.low_per_s <= est.value_per_s <= est.high_per_s
    assert est.value_per_s == pytest.approx(statistics.fmean(samples))
    half = (est.high_per_s - est.low_per_s) / 2
    expected = t_975(len(samples) - 1) * statistics.stdev(samples) / math.sqrt(len(samples))
    assert half == pytest.approx(expected, abs=1e-9)


def test_the_case_study_saturates_near_its_plan_with_an_interval() -> None:
    body, base_dir = read_scenario_file("paper-case-study")
    est = seeded_saturation(
        body, base_dir, "paper-case-study", "prfaas", seeds=range(3), num_requests=600
    )
    assert len(set(est.samples_per_s)) == 3  # the seeds draw different arrivals
    assert est.low_per_s < est.value_per_s < est.high_per_s
    assert est.value_per_s == pytest.approx(est.planned_per_s, rel=0.10)
    assert max(est.samples_per_s) > est.value_per_s  # the maximum alone overstates it


def test_a_single_seed_is_refused() -> None:
    body, base_dir = read_scenario_file("paper-case-study")
    with pytest.raises(SpecError, match="at least 2 seeds"):
        seeded_saturation(body, base_dir, "x", "prfaas", seeds=[0])


def test_simulate_reports_saturation_as_a_value_with_an_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from prfaas.cli.app import main

    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--saturation-seeds", "2", "--json"])
    assert exit_info.value.code in (0, None)
    report = json.loads(capsys.readouterr().out)["prfaas"]
    assert report["low_per_s"] < report["value_per_s"] < report["high_per_s"]
    assert len(report["samples_per_s"]) == 2
