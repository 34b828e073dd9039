"""Timing profiles: measured curves, the roofline, and the paper's Tables 3 and 5."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.specs.catalog import get_chip, get_model, paper_rows, profile_for
from prfaas.specs.perf import MeasuredCurve, MeasuredProfile, RooflineProfile, kv_throughput_gbps
from prfaas.specs.throughput import kv_throughput_rows

TABLE_LENGTHS = [1024, 8192, 32768, 131072]


@given(
    points=st.lists(
        st.tuples(st.integers(1, 10**6), st.floats(0.01, 100.0)),
        min_size=2,
        max_size=8,
        unique_by=lambda p: p[0],
    )
)
def test_measured_curve_passes_through_every_point(points: list[tuple[int, float]]) -> None:
    points.sort()
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    curve = MeasuredCurve.fit(xs, ys)
    for x, y in zip(xs, ys, strict=True):
        assert curve(x) == pytest.approx(y, rel=1e-9)


def test_measured_curve_is_a_power_law_between_points_and_linear_outside() -> None:
    curve = MeasuredCurve.fit([1000.0, 4000.0, 16000.0], [1.0, 4.0, 8.0])
    assert curve(2000.0) == pytest.approx(2.0)  # y ~ x between the first two points
    assert curve(8000.0) == pytest.approx(4.0 * 2**0.5)  # y ~ sqrt(x) between the last two
    assert curve(0.0) == pytest.approx(0.0)  # slope 1/1000 extended down
    assert curve(20000.0) == pytest.approx(8.0 + 4000 * 4.0 / 12000)


def test_measured_curve_rejects_unsorted_or_too_few_points() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        MeasuredCurve.fit([2.0, 1.0, 3.0], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="at least 2"):
        MeasuredCurve.fit([1.0], [1.0])


def test_table5_profile_is_measured_and_monotone_between_points() -> None:
    profile = profile_for(get_model("prfaas-1t"), get_chip("h200"), 8)
    assert isinstance(profile, MeasuredProfile)
    lengths = range(128, 131072, 512)
    times = [profile.prefill_s(n) for n in lengths]
    sizes = [profile.cache_bytes(n) for n in lengths]
    assert times == sorted(times) and sizes == sorted(sizes)


def test_table5_kv_throughput_within_one_percent() -> None:
    """Acceptance: Table 5's Phi_kv reproduced from its own size and time columns."""
    profile = profile_for(get_model("prfaas-1t"), get_chip("h200"), 8)
    paper = {1024: 3.61, 8192: 3.59, 32768: 3.19, 131072: 2.62}
    for length, phi in paper.items():
        assert kv_throughput_gbps(profile, length) == pytest.approx(phi, rel=0.01)


def _table3_rows() -> dict[tuple[str, int], float]:
    rows = [r for r in paper_rows() if r.table == "Table 3"]
    models = [get_model(r.model) for r in rows]
    computed = kv_throughput_rows(models, get_chip("h200"), 8, TABLE_LENGTHS)
    return {(r.model, r.length): r.phi_gbps for r in computed}


def test_table3_from_architecture_alone() -> None:
    """Acceptance: 24 cells within 2.5x, median within 1.5x, no per-model constants."""
    computed = _table3_rows()
    ratios = []
    for row in paper_rows():
        if row.table != "Table 3":
            continue
        assert isinstance(profile_for(get_model(row.model), get_chip("h200"), 8), RooflineProfile)
        for length, phi in row.phi_gbps.items():
            ratios.append(computed[(row.model, length)] / phi)
    assert len(ratios) == 24
    assert all(1 / 2.5 <= r <= 2.5 for r in ratios), ratios
    assert 1 / 1.5 <= statistics.median(ratios) <= 1.5


def test_table3_hybrid_reductions_hold() -> None:
    computed = _table3_rows()
    assert computed[("minimax-m2.5", 32768)] >= 8 * computed[("mimo-v2-flash", 32768)]
    assert computed[("qwen3-235b", 32768)] >= 3 * computed[("qwen3.5-397b", 32768)]


def test_roofline_prefill_by_hand() -> None:
    model, chip = get_model("qwen3-235b"), get_chip("h200")
    cal = chip.calibration
    peak = 8 * chip.dense_bf16_flops
    expected = (
        cal.prefill_overhead_s
        + model.matmul_flops(32768) / (peak * cal.prefill_mfu)
        + model.mixing_flops(32768) / (peak * cal.attention_efficiency)
    )
    assert RooflineProfile(model, chip, 8).prefill_s(32768) == pytest.approx(expected)


def test_more_gpus_prefill_faster() -> None:
    model, chip = get_model("minimax-m2.5"), get_chip("h100")
    assert RooflineProfile(model, chip, 16).prefill_s(65536) < RooflineProfile(
        model, chip, 8
    ).prefill_s(65536)


@given(batch=st.integers(1, 256), context=st.integers(1, 131072))
def test_decode_step_grows_with_batch_and_context(batch: int, context: int) -> None:
    profile = RooflineProfile(get_model("prfaas-1t"), get_chip("h20"), 8)
    step = profile.decode_step_s(batch, context)
    assert step > profile.chip.calibration.decode_overhead_s
    assert profile.decode_step_s(batch + 1, context) >= step
    assert profile.decode_step_s(batch, context + 4096) >= step


def test_decode_of_measured_profile_comes_from_the_roofline() -> None:
    model, chip = get_model("prfaas-1t"), get_chip("h200")
    measured = profile_for(model, chip, 8)
    assert measured.decode_step_s(16, 30000) == RooflineProfile(model, chip, 8).decode_step_s(
        16, 30000
    )
