"""The generated diurnal ramp: its rate rises to the peak and falls, and its prompts lengthen
with the load (what moves the planner's threshold during a run)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.workload.diurnal import DiurnalSpec, diurnal_trace, load_fraction


def test_the_rate_and_the_prompts_follow_the_day() -> None:
    spec = DiurnalSpec(num_requests=6000, period_s=1800.0, seed=3)
    trace = diurnal_trace(spec)
    times_s = np.array([r.timestamp_ms for r in trace]) / 1000.0
    assert np.all(np.diff(times_s) >= 0)
    trough = (times_s % spec.period_s < 300) | (times_s % spec.period_s > 1500)
    peak = np.abs(times_s % spec.period_s - 900) < 300
    assert peak.sum() > 1.8 * trough.sum()  # 600 s each: the peak's rate is well above
    lengths = np.array([r.input_tokens for r in trace])
    assert np.median(lengths[peak]) > 1.8 * np.median(lengths[trough])


@settings(max_examples=30, deadline=None)
@given(st.floats(0.05, 1.0), st.floats(0.0, 10_000.0))
def test_load_stays_between_the_trough_and_the_peak(trough: float, at_s: float) -> None:
    spec = DiurnalSpec(trough_fraction=trough)
    assert trough - 1e-12 <= load_fraction(spec, at_s) <= 1.0 + 1e-12


def test_every_request_names_its_own_blocks() -> None:
    trace = diurnal_trace(DiurnalSpec(num_requests=200, seed=0))
    ids = [i for r in trace for i in r.hash_ids]
    assert len(ids) == len(set(ids))
    assert all(len(r.hash_ids) * 512 >= r.input_tokens > (len(r.hash_ids) - 1) * 512 for r in trace)
