"""The grid search (Eq. 7-8): never beaten by any grid point, ties broken towards balance."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prfaas.planner import Cluster, Hardware, StageModel, best_configuration
from prfaas.planner.optimise import operating_point, weighted_quantile
from prfaas.workload import EmpiricalLengths, FixedLength, Workload

FakeFactory = Callable[..., Any]  # the `fake_profile` fixture
STEP = 100


def brute_force_lambda(model: StageModel, samples: list[int], n_p: int, t: float) -> float:
    """Eq. 3-6 straight from the samples, one threshold at a time (no histogram, no arrays)."""
    hw = model.hardware
    above = [s for s in samples if s > t]
    below = [s for s in samples if s <= t]
    p = len(above) / len(samples)
    bounds = [(hw.pd.num_instances - n_p) * model.decode.rate_per_instance(200)]
    if above:
        l_long = round(sum(above) / len(above))
        profile = hw.prfaas.profile
        compute = hw.prfaas.num_instances / profile.prefill_s(l_long)
        egress = hw.link_gbps * 1e9 / 8 / profile.cache_bytes(l_long)
        bounds.append(min(compute, egress) / p)
    if below:
        l_short = round(sum(below) / len(below))
        bounds.append(n_p / hw.pd.profile.prefill_s(l_short) / (1 - p))
    return min(bounds)


cases = st.fixed_dictionaries(
    {
        "samples": st.lists(st.integers(1, 6_000), min_size=1, max_size=25),
        "link_gbps": st.floats(0.5, 200),
        "prfaas_per_token_s": st.floats(1e-5, 4e-4),
        "n_prfaas": st.integers(1, 5),
        "num_pd": st.integers(2, 9),
        "decode_per_request_s": st.floats(1e-4, 2e-3),
    }
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases)
def test_the_optimum_is_not_beaten_by_any_grid_point(
    fake_profile: FakeFactory, case: dict[str, Any]
) -> None:
    hardware = Hardware(
        prfaas=Cluster(
            fake_profile("h200", prefill_per_token_s=case["prfaas_per_token_s"]),
            case["n_prfaas"],
        ),
        pd=Cluster(
            fake_profile("h20", decode_per_request_s=case["decode_per_request_s"]),
            case["num_pd"],
        ),
        link_gbps=case["link_gbps"],
        decode_slo_tokens_per_s=40,
    )
    samples = case["samples"]
    workload = Workload.synthetic(EmpiricalLengths.of(samples), FixedLength(200), "random")
    model = StageModel.build(hardware, workload, STEP)
    num_pd = case["num_pd"]
    n_p, k = best_configuration(model, case["n_prfaas"], range(1, num_pd), num_pd)
    best = operating_point(model, case["n_prfaas"], n_p, num_pd - n_p, k, has_threshold=True)
    thresholds = np.arange(math.ceil(max(samples) / STEP) + 1) * STEP
    brute = max(
        brute_force_lambda(model, samples, other_n_p, t)
        for other_n_p in range(1, num_pd)
        for t in thresholds
    )
    # Both sides round mean lengths to whole tokens, but the model's means come from histogram
    # sums whose float error can flip a .5 rounding: one token moves T by well under 0.1%.
    assert best.lambda_max == pytest.approx(brute, rel=1e-3)


def test_ties_go_to_the_balanced_threshold(fake_profile: FakeFactory) -> None:
    # Decode is so slow that Lambda_max = Theta_pdd over a wide range of thresholds.
    hardware = Hardware(
        prfaas=Cluster(fake_profile("h200"), 4),
        pd=Cluster(fake_profile("h20", decode_per_request_s=0.019), 8),
        link_gbps=100,
        decode_slo_tokens_per_s=40,
    )
    workload = Workload.synthetic(
        EmpiricalLengths.of(list(range(100, 20_001, 100))), FixedLength(1000), "uniform"
    )
    model = StageModel.build(hardware, workload, STEP)
    n_p, k = best_configuration(model, 4, [3], 8)
    rates = model.rates(4, 3.0, 5.0)
    plateau = rates.lambda_max >= rates.lambda_max.max() * (1 - 1e-12)
    assert plateau.sum() > 10  # a real plateau
    headroom = np.minimum(rates.prfaas_bound, rates.pd_p_bound)
    assert k == int(np.argmax(np.where(plateau, headroom, -np.inf)))
    assert (n_p, rates.lambda_max[k]) == (3, pytest.approx(rates.theta_pd_d[k]))


def test_weighted_quantile_is_the_lower_quantile() -> None:
    values = np.array([3.0, 1.0, 2.0])
    weights = np.array([0.1, 0.6, 0.3])
    assert weighted_quantile(values, weights, 0.5) == 1.0
    assert weighted_quantile(values, weights, 0.6) == 1.0
    assert weighted_quantile(values, weights, 0.61) == 2.0
    assert weighted_quantile(values, weights, 0.95) == 3.0
