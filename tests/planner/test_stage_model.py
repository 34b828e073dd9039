"""The steady-state model (Eq. 3-6) on hand-computed cases, and its bounds as properties."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prfaas.planner import Cluster, Hardware, InfeasiblePlanError, Stage, StageModel
from prfaas.planner.model import decode_capacity
from prfaas.planner.optimise import operating_point
from prfaas.workload import EmpiricalLengths, FixedLength, Workload

FakeFactory = Callable[..., Any]  # the `fake_profile` fixture
TWO_LENGTHS = Workload.synthetic(EmpiricalLengths.of([1000, 3000]), FixedLength(100), "two")


def build(fake_profile: FakeFactory, link_gbps: float, **pd_timing: float) -> StageModel:
    hardware = Hardware(
        prfaas=Cluster(fake_profile("h200", prefill_base_s=0.2, prefill_per_token_s=5e-5), 1),
        pd=Cluster(fake_profile("h20", **pd_timing), 3),
        link_gbps=link_gbps,
        decode_slo_tokens_per_s=40,
    )
    return StageModel.build(hardware, TWO_LENGTHS, step_tokens=100)


def test_equations_3_to_6_by_hand(fake_profile: FakeFactory) -> None:
    model = build(fake_profile, link_gbps=100)
    point = operating_point(model, 1, 2, 1, 20, has_threshold=True)  # t = 2,000 tokens
    # p = 0.5, l_long = 3000, l_short = 1000.
    # PrfaaS: 1 / (0.2 + 5e-5 * 3000) = 2.857; PD-P: 2 / (0.5 + 1e-4 * 1000) = 3.333;
    # PD-D: BS_max = 20 at 25 ms -> 20 / (0.025 * 100) = 8 req/s.
    assert point.threshold_tokens == 2000
    assert point.offload_fraction == 0.5
    assert (point.long_mean_tokens, point.short_mean_tokens) == (3000, 1000)
    assert point.theta_prfaas == pytest.approx(1 / 0.35)
    assert point.theta_pd_p == pytest.approx(2 / 0.6)
    assert point.theta_pd_d == pytest.approx(8.0)
    assert point.lambda_max == pytest.approx(2 / 0.35)
    assert point.bottleneck is Stage.PRFAAS
    assert point.egress_gbps == pytest.approx(0.5 * (2 / 0.35) * 3000 * 20_000 * 8 / 1e9)
    # TTFT: 3000 on PrfaaS (0.35 s), 1000 on PD-P (0.6 s).
    assert point.ttft_mean_s == pytest.approx(0.475)
    assert point.ttft_p90_s == pytest.approx(0.6)
    assert (point.num_gpus, point.price) == (32, 8 * 2.0 + 24 * 1.0)


def test_a_thin_link_bounds_prfaas_by_egress(fake_profile: FakeFactory) -> None:
    model = build(fake_profile, link_gbps=1)
    point = operating_point(model, 1, 2, 1, 20, has_threshold=True)
    # B_out / S_kv(l_long) = 1.25e8 B/s / 6e7 B = 2.083 req/s < 2.857 of compute.
    assert point.theta_prfaas == pytest.approx(1.25e8 / 6e7)
    assert point.bottleneck is Stage.LINK


def test_the_grid_ends_are_the_baselines(fake_profile: FakeFactory) -> None:
    model = build(fake_profile, link_gbps=100)
    last = model.num_thresholds - 1
    homogeneous = operating_point(model, 0, 2, 1, last, has_threshold=False)
    assert homogeneous.offload_fraction == 0.0 and homogeneous.theta_prfaas is None
    assert homogeneous.lambda_max == pytest.approx(2 / (0.5 + 1e-4 * 2000))  # T(E[l])
    assert homogeneous.egress_gbps == 0.0
    naive = operating_point(model, 1, 0, 3, 0, has_threshold=False)
    assert naive.offload_fraction == 1.0 and naive.theta_pd_p is None
    assert naive.lambda_max == pytest.approx(1 / (0.2 + 5e-5 * 2000))


def test_decode_batch_is_the_largest_within_the_slo(fake_profile: FakeFactory) -> None:
    profile = fake_profile(decode_base_s=0.005, decode_per_request_s=0.0007)
    capacity = decode_capacity(profile, 40, 10_000, 10_000)
    assert capacity.max_batch_size == 28  # 0.005 + 0.0007 * 28 = 0.0246 <= 0.025 < 0.0253
    assert capacity.step_s == pytest.approx(0.0246)
    assert capacity.rate_per_instance(1024) == pytest.approx(28 / (0.0246 * 1024))
    with pytest.raises(InfeasiblePlanError, match="SLO"):
        decode_capacity(fake_profile(decode_base_s=0.03), 40, 10_000, 10_000)


random_cases = st.fixed_dictionaries(
    {
        "samples": st.lists(st.integers(1, 8_000), min_size=1, max_size=30),
        "link_gbps": st.floats(0.1, 400),
        "per_token_s": st.floats(1e-5, 1e-3),
        "n_prfaas": st.integers(0, 6),
        "n_p": st.integers(0, 6),
        "n_d": st.integers(1, 6),
    }
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=random_cases)
def test_lambda_is_the_least_stage_bound(fake_profile: FakeFactory, case: dict[str, Any]) -> None:
    n_prfaas, n_p, n_d = case["n_prfaas"], case["n_p"], case["n_d"]
    hardware = Hardware(
        prfaas=Cluster(
            fake_profile("h200", prefill_per_token_s=case["per_token_s"]), max(n_prfaas, 1)
        ),
        pd=Cluster(fake_profile("h20"), n_p + n_d),
        link_gbps=case["link_gbps"],
        decode_slo_tokens_per_s=40,
    )
    workload = Workload.synthetic(EmpiricalLengths.of(case["samples"]), FixedLength(200), "r")
    model = StageModel.build(hardware, workload, 100)
    rates = model.rates(n_prfaas, float(n_p), float(n_d))
    bounds = np.stack([rates.prfaas_bound, rates.pd_p_bound, rates.theta_pd_d])
    assert not np.any(np.isnan(rates.lambda_max))
    assert np.all(rates.lambda_max >= 0)
    assert np.all(rates.lambda_max <= bounds + 1e-12)
    np.testing.assert_array_equal(rates.lambda_max, bounds.min(axis=0))
    # Each stage carries at most its share of Lambda_max: Theta_prfaas >= p * Lambda, etc.
    p = model.split.offload_fraction
    assert np.all(rates.theta_prfaas + 1e-9 >= p * rates.lambda_max)
    assert np.all(rates.theta_pd_p + 1e-9 >= np.where(p < 1, (1 - p) * rates.lambda_max, 0))
