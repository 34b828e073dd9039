"""Length distributions and the histogram currency: exact splits, the paper's derived facts."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.workload import EmpiricalLengths, FixedLength, LengthHistogram, TruncatedLognormal

PAPER = TruncatedLognormal(mu=9.90, sigma=1.00, min_tokens=128, max_tokens=131072)


def test_paper_lognormal_matches_the_derived_calibration_facts() -> None:
    # paper.md "[derived] calibration facts": E[L] ~ 27.3-27.5K, p ~ 0.495, l_long ~ 44.8-45.0K,
    # l_short ~ 10.2K, P90 ~ 62.4K at t = 19.4K.
    t = np.array(19_400.0)
    p = 1 - float(PAPER.cdf(t))
    long_mean = (PAPER.mean_tokens - float(PAPER.partial_mean(t))) / p
    short_mean = float(PAPER.partial_mean(t)) / (1 - p)
    assert 27_300 <= PAPER.mean_tokens <= 27_500
    assert p == pytest.approx(0.496, abs=0.001)
    assert 44_800 <= long_mean <= 45_100
    assert short_mean == pytest.approx(10_200, rel=0.01)
    assert PAPER.quantile(0.9) == pytest.approx(62_400, rel=0.002)


def test_lognormal_mean_agrees_with_sampling() -> None:
    rng = np.random.default_rng(7)
    samples = rng.lognormal(PAPER.mu, PAPER.sigma, 400_000)
    kept = samples[(samples >= PAPER.min_tokens) & (samples <= PAPER.max_tokens)]
    assert PAPER.mean_tokens == pytest.approx(kept.mean(), rel=0.005)
    assert float(PAPER.cdf(np.array(20_000.0))) == pytest.approx(np.mean(kept <= 20_000), abs=3e-3)


lognormals = st.builds(
    TruncatedLognormal,
    mu=st.floats(6.0, 11.0),
    sigma=st.floats(0.3, 2.0),
    min_tokens=st.integers(1, 500),
    max_tokens=st.integers(20_000, 200_000),
)


@settings(max_examples=40, deadline=None)
@given(dist=lognormals, step=st.integers(20, 100))
def test_histogram_split_is_exact_at_every_edge(dist: TruncatedLognormal, step: int) -> None:
    hist = dist.histogram(step)
    split = hist.split()
    edges = split.threshold_tokens
    p = 1 - dist.cdf(edges)
    total = dist.mean_tokens
    np.testing.assert_allclose(split.offload_fraction, p, atol=1e-9)
    inside = (p > 1e-6) & (p < 1 - 1e-6)
    long_mean = (total - dist.partial_mean(edges[inside])) / p[inside]
    short_mean = dist.partial_mean(edges[inside]) / (1 - p[inside])
    np.testing.assert_allclose(split.long_mean_tokens[inside], long_mean, rtol=1e-6)
    np.testing.assert_allclose(split.short_mean_tokens[inside], short_mean, rtol=1e-6)
    assert hist.mean == pytest.approx(total, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(dist=lognormals, q=st.floats(0.01, 0.99))
def test_lognormal_quantile_inverts_the_cdf(dist: TruncatedLognormal, q: float) -> None:
    assert float(dist.cdf(np.array(dist.quantile(q)))) == pytest.approx(q, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(
    samples=st.lists(st.integers(1, 5_000), min_size=1, max_size=60),
    step=st.integers(1, 100),
)
def test_empirical_split_matches_brute_force(samples: list[int], step: int) -> None:
    split = EmpiricalLengths.of(samples).histogram(step).split()
    values = np.array(samples, dtype=np.float64)
    for t, p, long_mean, short_mean in zip(
        split.threshold_tokens,
        split.offload_fraction,
        split.long_mean_tokens,
        split.short_mean_tokens,
        strict=True,
    ):
        above, below = values[values > t], values[values <= t]
        assert p == pytest.approx(len(above) / len(values), abs=1e-12)
        if len(above):
            assert long_mean == pytest.approx(above.mean()) and long_mean > t
        else:
            assert math.isnan(long_mean) and p == 0.0
        if len(below):
            assert short_mean == pytest.approx(below.mean()) and short_mean <= t * (1 + 1e-12)
        else:
            assert math.isnan(short_mean) and p == 1.0


def test_a_sample_on_an_edge_belongs_to_the_bin_below() -> None:
    hist = EmpiricalLengths.of([100, 101]).histogram(100)
    np.testing.assert_array_equal(hist.edges_tokens, [0.0, 100.0, 200.0])
    np.testing.assert_array_equal(hist.mass, [0.5, 0.5])
    np.testing.assert_array_equal(hist.mean_tokens, [100.0, 101.0])


def test_fixed_length_is_a_point_mass() -> None:
    fixed = FixedLength(1024)
    hist = fixed.histogram(100)
    assert fixed.mean_tokens == 1024 == hist.mean
    assert hist.quantile(0.5) == pytest.approx(1024, abs=100)
    with pytest.raises(ValueError):
        FixedLength(0)


def test_histogram_quantile_interpolates_inside_a_bin() -> None:
    hist = LengthHistogram(
        np.array([0.0, 100.0, 200.0]), np.array([0.5, 0.5]), np.array([50.0, 150.0])
    )
    assert hist.quantile(0.25) == 50.0
    assert hist.quantile(0.9) == pytest.approx(180.0)


@pytest.mark.parametrize(
    ("edges", "mass"),
    [([0.0, 1.0], [0.5]), ([0.0, 1.0, 2.0], [1.0]), ([0.0, 1.0], [-1.0])],
)
def test_histogram_rejects_inconsistent_arrays(edges: list[float], mass: list[float]) -> None:
    with pytest.raises(ValueError):
        LengthHistogram(np.array(edges), np.array(mass), np.array(edges[:-1]))


def test_invalid_distributions_are_rejected() -> None:
    with pytest.raises(ValueError):
        TruncatedLognormal(9.9, 1.0, 1000, 100)
    with pytest.raises(ValueError):
        EmpiricalLengths.of([])
    with pytest.raises(ValueError):
        EmpiricalLengths.of([0, 5])
