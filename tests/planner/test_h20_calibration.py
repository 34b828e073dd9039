"""The H20 prefill calibration: the fit itself, and the catalog still holding its result."""

from __future__ import annotations

import pytest

from prfaas.planner.calibration import (
    LatencyObservation,
    fit_quadratic_prefill,
    table6_h20_observations,
)
from prfaas.specs.catalog import get_chip, get_model, profile_for
from prfaas.workload import TruncatedLognormal

CASE_STUDY = TruncatedLognormal(mu=9.90, sigma=1.00, min_tokens=128, max_tokens=131072)


def test_exact_observations_give_back_the_quadratic() -> None:
    def truth(length: float) -> float:
        return 0.4 + 1e-4 * length + 3e-10 * length**2

    observations = [LatencyObservation.at(str(x), x, truth(x)) for x in (1e3, 2e4, 9e4)]
    lengths, weights = (1e3, 5e4), (0.25, 0.75)
    mean_s = 0.25 * truth(1e3) + 0.75 * truth(5e4)
    observations.append(LatencyObservation("mean", lengths, weights, mean_s))
    fit = fit_quadratic_prefill(observations)
    assert fit.constant_s == pytest.approx(0.4)
    assert fit.linear_s_per_token == pytest.approx(1e-4)
    assert fit.quadratic_s_per_token2 == pytest.approx(3e-10)
    assert fit.rms_relative_error == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError):
        fit_quadratic_prefill(observations[:2])


def test_table6_fit_is_tight_and_close_to_the_derived_hint() -> None:
    fit = fit_quadratic_prefill(table6_h20_observations(CASE_STUDY.histogram(100)))
    assert fit.rms_relative_error < 0.002
    # paper.md's [derived] hint: T_H20(l) = 0.469 + 1.300e-4 l + 2.94e-10 l^2.
    assert fit.constant_s == pytest.approx(0.469, rel=0.02)
    assert fit.linear_s_per_token == pytest.approx(1.300e-4, rel=0.02)
    assert fit.quadratic_s_per_token2 == pytest.approx(2.94e-10, rel=0.03)


def test_the_catalog_h20_profile_is_the_fitted_curve() -> None:
    fit = fit_quadratic_prefill(table6_h20_observations(CASE_STUDY.histogram(100)))
    profile = profile_for(get_model("prfaas-1t"), get_chip("h20"), 8)
    assert profile.source == "measured (calibrated to arXiv 2604.15039 Table 6)"
    for length in (1024, 5_000, 10_224, 27_486, 44_800, 62_410, 100_000, 131_072):
        # The catalog holds points on the curve; between them the profile interpolates.
        assert profile.prefill_s(length) == pytest.approx(fit(length), rel=5e-3)


def test_the_paper_threshold_must_be_a_grid_edge() -> None:
    with pytest.raises(ValueError, match="edge at 19400"):
        table6_h20_observations(CASE_STUDY.histogram(64))
