"""An engine's disaggregation rules in the parallelism search (issue 30 point 3): under an
engine's data the search returns only shape pairs that engine can serve disaggregated, says
what the rule removed, and leaves the roofline's plans as they were."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.planner.engine_rules import pair_refusal, plan_refusal
from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.model import Cluster, Hardware
from prfaas.planner.parallel import search_parallelism
from prfaas.specs.catalog import get_chip, get_model, profile_for
from prfaas.specs.memory import instance_memory
from prfaas.specs.timing import (
    AicEngine,
    Parallelism,
    TimingChoice,
    TimingSource,
    default_parallelism,
    time_instance,
)
from prfaas.workload.lengths import FixedLength, TruncatedLognormal
from prfaas.workload.workload import Workload
from shared_specs import needs_aic

ISL_8K = Workload.synthetic(FixedLength(8000), FixedLength(512), "ISL 8000 / OSL 512")
SGLANG = TimingChoice(TimingSource.AIC, AicEngine.SGLANG)


@pytest.mark.parametrize(
    ("prefill", "decode", "refused"),
    [
        (Parallelism(tp=2), Parallelism(tp=4), True),
        (Parallelism(tp=1, dp=8), Parallelism(tp=8), True),
        (Parallelism(tp=8, ep=8), Parallelism(tp=1, ep=8, dp=8), True),
        (Parallelism(tp=2, dp=4), Parallelism(tp=2), False),  # same TP: allowed
        (Parallelism(tp=1, dp=4), Parallelism(tp=1, ep=8, dp=8), False),
        (Parallelism(tp=4), Parallelism(tp=4, ep=4), False),
    ],
)
def test_sglang_pairs_prefill_and_decode_of_one_attention_tp(
    prefill: Parallelism, decode: Parallelism, refused: bool
) -> None:
    refusal = pair_refusal(AicEngine.SGLANG, prefill, decode)
    assert (refusal is not None) is refused
    if refused:
        assert refusal == (
            "sglang pairs prefill and decode of the same attention TP only "
            f"({prefill.label()} prefill, {decode.label()} decode)"
        )


@pytest.mark.parametrize("engine", [AicEngine.VLLM, AicEngine.TRTLLM])
def test_vllm_and_trtllm_pair_any_two_shapes(engine: AicEngine) -> None:
    # aiconfigurator's `_require_same_tp_gate` is SGLang's only: other engines pair freely.
    for prefill, decode in [
        (Parallelism(tp=2), Parallelism(tp=4)),
        (Parallelism(tp=1, dp=8), Parallelism(tp=8, ep=8)),
    ]:
        assert pair_refusal(engine, prefill, decode) is None


def _roofline_cluster(model: str, num_gpus: int, split: Parallelism) -> Cluster:
    profile = profile_for(get_model(model), get_chip("h200"), split.num_gpus)
    return Cluster(profile, num_gpus // split.num_gpus, instance_memory(profile), split)


def _shaped(prfaas: Parallelism, pd: Parallelism, decode: Parallelism) -> Hardware:
    return Hardware(
        prfaas=_roofline_cluster("llama-3.1-70b", 8, prfaas),
        pd=_roofline_cluster("llama-3.1-70b", 16, pd),
        pd_decode=_roofline_cluster("llama-3.1-70b", 16, decode),
        link_gbps=100,
        decode_slo_tokens_per_s=30,
    )


def test_the_rule_binds_pd_p_and_prfaas_prefill_to_the_pd_d_shape() -> None:
    tp2, tp4 = Parallelism(tp=2), Parallelism(tp=4)
    # PrfaaS prefill ships its KV to PD-D too, so it needs PD-D's TP, but only in the
    # deployments with PrfaaS instances.
    prfaas_off = _shaped(tp2, tp4, tp4)
    assert plan_refusal(prfaas_off, SGLANG, "homogeneous_pd") is None
    assert plan_refusal(prfaas_off, SGLANG, "equal_cost_homogeneous") is None
    assert plan_refusal(prfaas_off, SGLANG, "prfaas_pd") == (
        "PrfaaS -> PD-D: " + str(pair_refusal(AicEngine.SGLANG, tp2, tp4))
    )
    assert plan_refusal(prfaas_off, SGLANG, "naive_heterogeneous") is not None
    pd_off = _shaped(tp4, tp2, tp4)
    assert plan_refusal(pd_off, SGLANG, "homogeneous_pd") == (
        "PD-P -> PD-D: " + str(pair_refusal(AicEngine.SGLANG, tp2, tp4))
    )
    # Only a plan timed by an engine's data is bound by that engine.
    for source in (TimingSource.ROOFLINE, TimingSource.MEASURED):
        assert plan_refusal(pd_off, TimingChoice(source), "prfaas_pd") is None
    assert plan_refusal(pd_off, TimingChoice(TimingSource.AIC, AicEngine.VLLM), "prfaas_pd") is None


def test_a_cluster_without_a_chosen_split_has_the_default_one() -> None:
    profile = profile_for(get_model("qwen3-235b"), get_chip("h200"), 8)
    assert Cluster(profile, 2).split == default_parallelism(get_model("qwen3-235b"), 8)


ROOFLINE_WORKLOAD = Workload.synthetic(
    TruncatedLognormal(9.9, 1.0, 128, 131_072), FixedLength(1024), "case-study lengths"
)


@settings(max_examples=8, deadline=None)
@given(
    model=st.sampled_from(["llama-3.1-70b", "qwen3-235b", "kimi-linear-48b"]),
    pd=st.tuples(st.sampled_from(["h20", "h200"]), st.integers(2, 5)),
    gpus=st.sampled_from([4, 8]),
    slo=st.sampled_from([20.0, 40.0]),
    deployment=st.sampled_from(["prfaas_pd", "homogeneous_pd"]),
)
def test_the_roofline_plans_as_before(
    model: str, pd: tuple[str, int], gpus: int, slo: float, deployment: str
) -> None:
    pd_chip, num_pd_instances = pd

    def cluster(chip: str, num_gpus: int) -> Cluster:
        profile = profile_for(get_model(model), get_chip(chip), gpus)
        return Cluster(profile, num_gpus // gpus, instance_memory(profile))

    hardware = Hardware(
        prfaas=cluster("h200", 2 * gpus),
        pd=cluster(pd_chip, num_pd_instances * gpus),
        link_gbps=100,
        decode_slo_tokens_per_s=slo,
    )
    for engine in AicEngine:  # the engine names no data under the roofline: no rule
        choice = TimingChoice(TimingSource.ROOFLINE, engine)
        try:
            ruled = search_parallelism(hardware, ROOFLINE_WORKLOAD, 1000, choice, deployment)
        except InfeasiblePlanError:  # an infeasible cell is infeasible both ways
            with pytest.raises(InfeasiblePlanError):
                search_parallelism(
                    hardware, ROOFLINE_WORKLOAD, 1000, choice, deployment, engine_rules=False
                )
            continue
        free = search_parallelism(
            hardware, ROOFLINE_WORKLOAD, 1000, choice, deployment, engine_rules=False
        )
        assert ruled.ruled_out is None
        assert ruled.hardware == free.hardware
        assert ruled.report.deployments == free.report.deployments


def _aic_hardware(model: str, chip: str, num_pd_gpus: int, tpot_ms: float) -> Hardware:
    spec, silicon = get_model(model), get_chip(chip)

    def cluster(num_gpus: int) -> Cluster:
        split = default_parallelism(spec, 8)
        profile = time_instance(spec, silicon, split, SGLANG).profile
        return Cluster(profile, num_gpus // 8, instance_memory(profile), split)

    return Hardware(
        prfaas=cluster(8),
        pd=cluster(num_pd_gpus),
        link_gbps=100,
        decode_slo_tokens_per_s=1e3 / tpot_ms,
    )


@needs_aic
@settings(max_examples=6, deadline=None)
@given(
    model=st.sampled_from(["llama-3.1-70b", "qwen3-235b", "qwen3.5-397b"]),
    chip=st.sampled_from(["h200", "b200"]),
    num_pd_gpus=st.sampled_from([16, 24]),
    tpot_ms=st.sampled_from([20.0, 33.0]),
    deployment=st.sampled_from(["prfaas_pd", "homogeneous_pd"]),
)
def test_every_plan_searched_under_sglang_keeps_its_rule(
    model: str, chip: str, num_pd_gpus: int, tpot_ms: float, deployment: str
) -> None:
    # SGLang is the engine with a rule (vLLM and TensorRT-LLM pair freely, above).
    choice, engine = SGLANG, AicEngine.SGLANG
    hardware = _aic_hardware(model, chip, num_pd_gpus, tpot_ms)
    found = search_parallelism(hardware, ISL_8K, 100, choice, deployment)
    hw = found.hardware
    assert pair_refusal(engine, hw.pd.split, hw.decode_cluster.split) is None
    if deployment == "prfaas_pd":
        assert pair_refusal(engine, hw.prfaas.split, hw.decode_cluster.split) is None
    if found.ruled_out is not None:  # what the rule removed was better, and is refused
        removed = found.ruled_out
        assert plan_refusal(removed.hardware, choice, deployment) == removed.refusal
        value = removed.report.deployments[deployment].lambda_max
        assert value > found.report.deployments[deployment].lambda_max


@needs_aic
def test_the_search_reports_the_better_plan_sglang_cannot_serve() -> None:
    # Llama-3.1-70B on 8 + 16 H200 at TPOT 33 ms: unconstrained, TP2 prefill beside TP4 decode
    # wins; SGLang cannot pair them, so the plan keeps one TP and names what it gave up.
    hardware = _aic_hardware("llama-3.1-70b", "h200", 16, 33.0)
    ruled = search_parallelism(hardware, ISL_8K, 100, SGLANG)
    free = search_parallelism(hardware, ISL_8K, 100, SGLANG, engine_rules=False)
    assert free.hardware.pd.split.tp != free.hardware.decode_cluster.split.tp
    assert ruled.ruled_out is not None
    assert ruled.ruled_out.hardware == free.hardware
    assert ruled.ruled_out.refusal.startswith("PD-P -> PD-D: sglang pairs")
    assert ruled.hardware.pd.split.tp == ruled.hardware.decode_cluster.split.tp
    best = ruled.report.deployments["prfaas_pd"].lambda_max
    assert best < free.report.deployments["prfaas_pd"].lambda_max
    assert free.ruled_out is None
