"""Fixed planning margins (`planner.margins`, `prfaas plan --margins aic`): the latency
corrections move the prefill times and the TPOT batch, the rate factors the stage rates, and
nothing else."""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import pytest

from prfaas.planner.margins import Margins, aic_margins
from prfaas.planner.model import Cluster, Hardware, StageModel
from prfaas.planner.plan import plan
from prfaas.specs.catalog import get_chip, get_model, profile_for
from prfaas.specs.memory import instance_memory
from prfaas.workload.lengths import FixedLength, TruncatedLognormal
from prfaas.workload.workload import Workload

AIC_LIKE = Margins(1.1, 1.08, 0.9, 0.92, "test")
WORKLOAD = Workload.synthetic(
    TruncatedLognormal(9.9, 1.0, 128, 131_072), FixedLength(1024), "case-study lengths"
)


def _hardware(margins: Margins | None) -> Hardware:
    def cluster(chip: str, num_gpus: int) -> Cluster:
        profile = profile_for(get_model("qwen3-235b"), get_chip(chip), 8)
        return Cluster(profile, num_gpus // 8, instance_memory(profile))

    return Hardware(
        prfaas=cluster("h200", 16),
        pd=cluster("h20", 48),
        link_gbps=100,
        decode_slo_tokens_per_s=40,
        margins=margins,
    )


def test_the_decode_latency_correction_sets_the_tpot_batch_and_the_rate_factor_scales_it() -> None:
    plain = StageModel.build(_hardware(None), WORKLOAD, 100)
    margined = StageModel.build(_hardware(AIC_LIKE), WORKLOAD, 100)
    profile = _hardware(None).pd.profile
    context, budget_s = round(WORKLOAD.mean_decode_context_tokens), 1 / 40

    def corrected_step(batch: int) -> float:
        return profile.decode_step_s(batch, context) * 1.08

    batch = margined.decode.latency_batch_size
    assert corrected_step(batch) <= budget_s < corrected_step(batch + 1)
    assert batch < plain.decode.latency_batch_size  # the correction binds the batch
    assert margined.decode.step_s == pytest.approx(corrected_step(margined.decode.max_batch_size))
    rates = margined.rates(4, 2.0, 3.0)
    expected = 3 * 0.92 * margined.decode.max_batch_size / (margined.decode.step_s * 1024)
    assert np.allclose(rates.theta_pd_d, expected)


def test_the_prefill_correction_and_rate_factor_scale_the_prefill_stages_not_the_link() -> None:
    plain = StageModel.build(_hardware(None), WORKLOAD, 100).rates(2, 3.0, 3.0)
    margined = StageModel.build(_hardware(AIC_LIKE), WORKLOAD, 100).rates(2, 3.0, 3.0)
    factor = 0.9 / 1.1
    assert np.allclose(margined.theta_pd_p, plain.theta_pd_p * factor, equal_nan=True)
    assert np.allclose(margined.prfaas_compute, plain.prfaas_compute * factor, equal_nan=True)
    plain_model = StageModel.build(_hardware(None), WORKLOAD, 100)
    egress = plain_model.link_bytes_per_s / plain_model.prfaas_cache_bytes
    expected = np.minimum(plain.prfaas_compute * factor, egress)
    p = plain_model.split.offload_fraction
    assert np.allclose(margined.theta_prfaas[p > 0], expected[p > 0])


def test_a_prefill_bound_plan_loses_the_prefill_factors_exactly() -> None:
    # 100K-token prompts and 16-token outputs: homogeneous PD binds on PD-P, whose rate is
    # N_p / T_prefill, so the margins take 0.9 / 1.1 of it at the same split.
    def cluster(num_gpus: int) -> Cluster:
        profile = profile_for(get_model("llama-3.1-70b"), get_chip("h200"), 8)
        return Cluster(profile, num_gpus // 8, instance_memory(profile))

    workload = Workload.synthetic(FixedLength(100_000), FixedLength(16), "long prompts")
    hardware = Hardware(cluster(8), cluster(56), 100, decode_slo_tokens_per_s=20)
    plain = plan(hardware, workload, 1000).deployments["homogeneous_pd"]
    margined = plan(replace(hardware, margins=AIC_LIKE), workload, 1000).deployments[
        "homogeneous_pd"
    ]
    assert str(plain.bottleneck) == str(margined.bottleneck) == "pd-p"
    assert (margined.n_p, margined.n_d) == (plain.n_p, plain.n_d)
    assert margined.lambda_max == pytest.approx(plain.lambda_max * 0.9 / 1.1)
    assert margined.ttft_mean_s == pytest.approx(plain.ttft_mean_s * 1.1)


def test_aiconfigurators_factors_are_read_from_its_package() -> None:
    pytest.importorskip("aiconfigurator.sdk.task_v2")
    margins = aic_margins()
    assert isinstance(margins, Margins)
    from aiconfigurator.sdk.task_v2 import Task

    fields = Task.__dataclass_fields__
    assert (margins.prefill_latency, margins.decode_latency) == (
        fields["prefill_latency_correction"].default,
        fields["decode_latency_correction"].default,
    )
    assert (margins.prefill_rate, margins.decode_rate) == (
        fields["rate_match_prefill_degradation"].default,
        fields["rate_match_decode_degradation"].default,
    )


def test_without_aiconfigurators_package_there_are_no_margins_and_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiconfigurator.sdk.task_v2", None)  # import fails
    reason = aic_margins()
    assert reason == (
        "the aiconfigurator package (aiconfigurator's planner, beside aiconfigurator-core) "
        "is not installed"
    )
