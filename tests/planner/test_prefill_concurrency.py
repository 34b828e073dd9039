"""Instances that prefill several prompts at once (attention-DP ranks, issue 30): one prompt's
TTFT is its own latency T, the instance's rate is d / T, and under a TTFT objective a stage of
N such instances is a queue of N x d servers of service time T (`planner.model`,
`planner.queueing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prfaas.planner import Cluster, Hardware, plan
from prfaas.planner.model import StageModel
from prfaas.planner.queueing import usable_utilisation
from prfaas.workload import FixedLength, TruncatedLognormal, Workload

FakeFactory = Callable[..., Any]  # the `fake_profile` fixture
STEP = 100
FIXED = Workload.synthetic(FixedLength(8000), FixedLength(200), "8K / 200")  # T_pd = 1.3 s
SPREAD = Workload.synthetic(
    TruncatedLognormal(9.0, 1.0, 128, 65_536), FixedLength(200), "lognormal"
)


def _hardware(
    fake_profile: FakeFactory,
    concurrency: int,
    *,
    scale: float = 1.0,
    num_pd: int = 8,
    slo_s: float | None = None,
) -> Hardware:
    """Both clusters' instances prefill `concurrency` prompts at once, each prompt taking the
    fake's latency x `scale`."""

    def profile(chip: str, per_token_s: float) -> Any:
        return fake_profile(
            chip,
            prefill_base_s=0.5 * scale,
            prefill_per_token_s=per_token_s * scale,
            prefill_concurrency=concurrency,
        )

    return Hardware(
        prfaas=Cluster(profile("h200", 5e-5), 2),
        pd=Cluster(profile("h20", 1e-4), num_pd),
        link_gbps=100,
        decode_slo_tokens_per_s=40,
        ttft_slo_s=slo_s,
    )


def test_a_dp8_instance_is_timed_by_one_prompt_and_rated_by_eight(
    fake_profile: FakeFactory,
) -> None:
    # Homogeneous PD serves every 8K prompt on PD-P: T = 0.5 + 0.8 = 1.3 s per prompt.
    report = plan(_hardware(fake_profile, 8), FIXED, STEP)
    homogeneous = report.deployments["homogeneous_pd"]
    assert homogeneous.ttft_mean_s == pytest.approx(1.3)
    assert homogeneous.ttft_p90_s == pytest.approx(1.3)
    assert homogeneous.theta_pd_p == pytest.approx(homogeneous.n_p * 8 / 1.3)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    concurrency=st.integers(1, 8),
    n_prfaas=st.integers(0, 4),
    n_p=st.integers(1, 8),
    n_d=st.integers(1, 8),
)
def test_the_rate_is_concurrency_over_latency_and_the_ttft_the_latency(
    fake_profile: FakeFactory, concurrency: int, n_prfaas: int, n_p: int, n_d: int
) -> None:
    """d prompts at once of latency T rate as one at a time of latency T / d (so d = 1 is the
    paper's model unchanged), while each prompt's TTFT stays T."""
    at_once = StageModel.build(_hardware(fake_profile, concurrency), SPREAD, STEP)
    serial = StageModel.build(_hardware(fake_profile, 1, scale=1.0 / concurrency), SPREAD, STEP)
    rates, serial_rates = at_once.rates(n_prfaas, n_p, n_d), serial.rates(n_prfaas, n_p, n_d)
    p = at_once.split.offload_fraction
    served = p < 1
    assert np.allclose(
        rates.theta_pd_p[served], n_p * concurrency / at_once.pd_prefill_s[served], rtol=1e-12
    )
    for field in ("theta_prfaas", "theta_pd_p", "theta_pd_d", "lambda_max"):
        assert np.allclose(
            getattr(rates, field), getattr(serial_rates, field), rtol=1e-9, equal_nan=True
        ), field
    for k in (0, at_once.num_thresholds // 2, at_once.num_thresholds - 1):
        ttft = at_once.ttft_s(k)
        finite = np.isfinite(ttft)
        assert np.allclose(ttft[finite], concurrency * serial.ttft_s(k)[finite], rtol=1e-9)


@pytest.mark.parametrize("concurrency", [2, 4, 8])
def test_under_a_ttft_objective_a_stage_is_instances_times_ranks_servers(
    fake_profile: FakeFactory, concurrency: int
) -> None:
    # 3 PD-P instances of d ranks, fixed 8K prompts (T = 1.3 s, C_s^2 = 0), objective 2.5 s.
    n_p, slo_s, service_s = 3, 2.5, 1.3
    model = StageModel.build(_hardware(fake_profile, concurrency, slo_s=slo_s), FIXED, STEP)
    top = model.num_thresholds - 1  # nothing offloaded: every prompt on PD-P
    theta = float(model.rates(0, n_p, 1).theta_pd_p[top])
    servers = n_p * concurrency
    rho = float(usable_utilisation(servers, service_s, service_s, 0.0, slo_s))
    assert theta == pytest.approx(rho * servers / service_s, rel=1e-9)
    # ... exactly what n_p x d one-at-a-time instances of the same latency carry,
    single = StageModel.build(_hardware(fake_profile, 1, slo_s=slo_s), FIXED, STEP)
    assert theta == pytest.approx(float(single.rates(0, servers, 1).theta_pd_p[top]), rel=1e-12)
    # ... and less than n_p one-at-a-time instances d times faster, whose prompts wait less
    # behind a shorter service (the same full rate, a different TTFT).
    faster = StageModel.build(
        _hardware(fake_profile, 1, scale=1.0 / concurrency, slo_s=slo_s), FIXED, STEP
    )
    assert theta < float(faster.rates(0, n_p, 1).theta_pd_p[top])
