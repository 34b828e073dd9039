"""SLO capacity: the bracketing + bisection search, and a small end-to-end search and sweep."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_fixtures import write_scenario

from prfaas.planner.scenario import read_scenario_file
from prfaas.sim.capacity import SLO_TARGET, capacity_sweep, search_scale, slo_capacity


@given(
    ratio=st.floats(0.001, 7.9),  # threshold / start: up to 8x the load below the start
    start=st.floats(0.05, 20.0),
    rel_tol=st.floats(0.005, 0.2),
)
def test_search_brackets_a_monotone_threshold(ratio: float, start: float, rel_tol: float) -> None:
    threshold = ratio * start
    calls: list[float] = []

    def meets(scale: float) -> bool:  # scales at or above the threshold meet the target
        calls.append(scale)
        return scale >= threshold

    meet, miss = search_scale(meets, start, rel_tol, max_probes=60)
    assert meet is not None and miss is not None
    assert miss < threshold <= meet
    assert meet / miss - 1 <= rel_tol
    assert len(calls) <= 60


def test_search_gives_up_after_max_probes() -> None:
    meet, miss = search_scale(lambda _: False, 1.0, 0.02, max_probes=3)
    assert (meet, miss) == (None, 4.0)


def test_search_stops_when_even_a_small_load_misses() -> None:
    calls: list[float] = []
    meet, miss = search_scale(lambda s: bool(calls.append(s)), 1.0, 0.02, max_probes=20)
    assert (meet, miss) == (None, 8.0) and calls == [1.0, 2.0, 4.0, 8.0]


def test_capacity_and_sweep_on_a_small_scenario(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path, arrivals={"process": "poisson", "rate_per_s": 2.0, "num_requests": 120}
    )
    body, base = read_scenario_file(str(path))
    result = slo_capacity(body, base, "x", "prfaas", rel_tol=0.1, max_probes=8)
    assert result.capacity_per_s is not None and result.time_scale is not None
    met = [p for p in result.probes if p.slo_fraction >= SLO_TARGET]
    missed = [p for p in result.probes if p.slo_fraction < SLO_TARGET]
    assert max(p.offered_per_s for p in met) == result.capacity_per_s
    assert missed and min(p.offered_per_s for p in missed) > result.capacity_per_s
    rows = capacity_sweep(
        body, base, "x", result, load_factors=[0.5, 2.0], policies=["prfaas", "homogeneous"]
    )
    assert [(r.policy, round(r.load_factor or 0, 6)) for r in rows] == [
        ("prfaas", 0.5),
        ("homogeneous", 0.5),
        ("prfaas", 2.0),
        ("homogeneous", 2.0),
    ]
    assert rows[0].offered_per_s == pytest.approx(result.capacity_per_s / 2)
