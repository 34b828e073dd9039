"""One memory model for planner and simulator (issue 27): the decode batch's memory bound, each
simulated decode instance's KV capacity, and the fit check, on a dense 70B and the case study."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.planner.model import decode_capacity
from prfaas.planner.plan import plan
from prfaas.planner.scenario import (
    AdmissionFile,
    ArrivalsFile,
    build_scenario,
    load_scenario,
    read_scenario_file,
)
from prfaas.sim.api import simulate_body
from prfaas.sim.config import build_run_config
from prfaas.specs.catalog import get_chip, get_model, profile_for
from prfaas.specs.memory import MEMORY_FRACTION, instance_memory

DENSE_70B = Path(__file__).parent / "data" / "dense-70b.yaml"


@pytest.mark.parametrize(
    ("policy", "deployment"), [("prfaas", "prfaas_pd"), ("homogeneous", "homogeneous_pd")]
)
def test_dense_70b_plan_and_simulation_agree_within_10_percent(
    policy: str, deployment: str
) -> None:
    # Before the memory model the simulator capped every decode instance at 64 GiB (7 requests of
    # this workload's 9 GB) and PrfaaS-PD saturated at half its plan.
    body, base_dir = read_scenario_file(str(DENSE_70B))
    scenario = build_scenario(body, base_dir, DENSE_70B.name)
    planned = plan(scenario.hardware, scenario.workload, scenario.threshold_step_tokens)
    lambda_max = planned.deployments[deployment].lambda_max
    assert body.simulation is not None
    # Saturation: every request admitted (admission off) at 1.5x the planned rate, seed fixed.
    simulation = body.simulation.model_copy(update={"admission": AdmissionFile(mode="off")})
    arrivals = ArrivalsFile(process="poisson", rate_per_s=1.5 * lambda_max, num_requests=2000)
    overloaded = body.model_copy(update={"arrivals": arrivals, "simulation": simulation})
    run = simulate_body(overloaded, base_dir, DENSE_70B.name, [policy])[0]
    assert run.report.summary.request_throughput_per_s == pytest.approx(lambda_max, rel=0.10)


def test_the_simulated_kv_capacity_is_the_memory_model() -> None:
    body, base_dir = read_scenario_file(str(DENSE_70B))
    scenario = build_scenario(body, base_dir, DENSE_70B.name)
    config = build_run_config(scenario, body, base_dir, "prfaas")
    memory = instance_memory(scenario.hardware.pd.profile)
    assert memory.kv_capacity_bytes is not None
    assert config.decode_kv_capacity_bytes == memory.kv_capacity_bytes
    # 0.9 x 8 x 96 GB, less 141 GB of bf16 weights and 1.5 GB of activations.
    assert memory.usable_bytes == MEMORY_FRACTION * 8 * 96e9
    assert memory.kv_capacity_bytes / 1e9 == pytest.approx(548.5, abs=0.5)
    report = plan(scenario.hardware, scenario.workload, scenario.threshold_step_tokens)
    assert config.decode_max_batch == report.decode.latency_batch_size
    assert report.warnings == ()


def test_the_decode_batch_is_bounded_by_memory_too() -> None:
    profile = profile_for(get_model("llama-3.1-70b"), get_chip("h20"), 8)
    kv_capacity = instance_memory(profile).kv_capacity_bytes
    assert kv_capacity is not None
    short = decode_capacity(profile, 40, 10_000, 10_000, kv_capacity)
    assert short.max_batch_size == short.latency_batch_size < short.memory_batch_size
    # 200K-token requests hold 65.5 GB each: 8 fit, fewer than the SLO allows.
    long = decode_capacity(profile, 40, 10_000, 200_000, kv_capacity)
    assert long.memory_batch_size == int(kv_capacity // (200_000 * 327_680)) == 8
    assert long.max_batch_size == 8 < long.latency_batch_size
    assert long.step_s == profile.decode_step_s(8, 10_000)


def test_weights_that_do_not_fit_are_named_and_still_plan() -> None:
    # The paper's case study: 1T parameters in fp8 on 8 x H20 (691 GB usable).
    scenario = load_scenario("paper-case-study")
    report = plan(scenario.hardware, scenario.workload, scenario.threshold_step_tokens)
    (pd_warning,) = [w for w in report.warnings if w.startswith("pd:")]
    assert "weights 1,018 GB" in pd_warning and "short by 328 GB" in pd_warning
    assert report.decode.memory_batch_size is None and report.decode.max_batch_size == 20
    assert report.deployments["prfaas_pd"].n_p == 3  # Table 6 still comes out
