"""The TTFT objective (issue 30): prefill stages queue, so a plan that must meet a TTFT SLO runs
them below saturation (`planner.queueing`), is refused where even an idle instance misses the
SLO, and is never better than the same plan without the objective."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prfaas.planner import Cluster, Hardware, load_scenario, plan
from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.queueing import mean_wait_s, usable_utilisation
from prfaas.workload import EmpiricalLengths, FixedLength, Workload

FakeFactory = Callable[..., Any]  # the `fake_profile` fixture
STEP = 100


@pytest.mark.parametrize("x", [1.2, 2.0, 5.0, 40.0])
def test_one_server_waits_as_the_closed_forms_say(x: float) -> None:
    """M/D/1 (Pollaczek-Khinchine): S + S rho / (2 (1 - rho)) = x S gives rho = (2x-2)/(2x-1);
    M/M/1: S + S rho / (1 - rho) = x S gives rho = (x-1)/x."""
    md1 = float(usable_utilisation(1, 1.0, 1.0, 0.0, x))
    mm1 = float(usable_utilisation(1, 1.0, 1.0, 1.0, x))
    assert md1 == pytest.approx((2 * x - 2) / (2 * x - 1), rel=1e-9)
    assert mm1 == pytest.approx((x - 1) / x, rel=1e-9)


def test_more_servers_run_busier_at_the_same_slo() -> None:
    busy = [float(usable_utilisation(c, 1.0, 1.0, 0.0, 2.0)) for c in (1, 2, 4, 16, 64)]
    assert busy == sorted(busy) and busy[-1] < 1.0
    assert float(usable_utilisation(4, 1.0, 1.0, 0.0, 0.99)) == 0.0  # idle misses it: no rate


def _hardware(fake_profile: FakeFactory, slo_s: float | None, num_pd: int = 8) -> Hardware:
    return Hardware(
        prfaas=Cluster(fake_profile("h200", prefill_per_token_s=5e-5), 2),
        pd=Cluster(fake_profile("h20"), num_pd),
        link_gbps=100,
        decode_slo_tokens_per_s=40,
        ttft_slo_s=slo_s,
    )


FIXED = Workload.synthetic(FixedLength(8000), FixedLength(200), "8K / 200")  # T_pd = 1.3 s


def test_a_slo_below_the_bare_prefill_of_both_paths_is_refused(fake_profile: FakeFactory) -> None:
    # 8K tokens take 1.3 s on PD and 0.9 s on PrfaaS: an 0.8 s objective no path meets.
    with pytest.raises(InfeasiblePlanError, match=r"TTFT objective of 0\.8 s"):
        plan(_hardware(fake_profile, 0.8), FIXED, STEP)


def test_a_baseline_that_misses_the_objective_serves_nothing_and_prfaas_pd_still_plans(
    fake_profile: FakeFactory,
) -> None:
    """1 s: PD alone misses it (1.3 s), the PrfaaS path meets it (0.9 s), so PrfaaS-PD offloads
    every request and the PD-only baselines serve nothing (their ratios None); the plan stands."""
    report = plan(_hardware(fake_profile, 1.0), FIXED, STEP)
    best = report.deployments["prfaas_pd"]
    assert best.lambda_max > 0 and best.offload_fraction == 1.0
    for name in ("homogeneous_pd", "equal_cost_homogeneous"):
        assert report.deployments[name].lambda_max == 0.0
        assert report.to_json()[name]["prfaas_pd_speedup"] is None
    assert report.to_json()["prfaas_pd"]["ratio_to_homogeneous"] is None


def test_the_case_study_offloads_its_way_under_an_objective_h20_alone_misses() -> None:
    """The paper's hardware at a 3 s mean-TTFT objective: homogeneous H20 PD cannot meet it
    (a mean prompt takes 4.45 s there), PrfaaS-PD can, by offloading the long prompts."""
    scenario = load_scenario("paper-case-study")
    hardware = replace(scenario.hardware, ttft_slo_s=3.0)
    report = plan(hardware, scenario.workload, scenario.threshold_step_tokens)
    assert report.deployments["homogeneous_pd"].lambda_max == 0.0
    best = report.deployments["prfaas_pd"]
    assert best.lambda_max > 0 and 0 < best.offload_fraction < 1


def test_a_tight_slo_derates_the_prefill_stage_to_where_its_queue_meets_it(
    fake_profile: FakeFactory,
) -> None:
    free = plan(_hardware(fake_profile, None), FIXED, STEP).deployments["homogeneous_pd"]
    tight = plan(_hardware(fake_profile, 2.0), FIXED, STEP).deployments["homogeneous_pd"]
    assert tight.lambda_max < free.lambda_max
    assert tight.n_p + tight.n_d == 10 and str(tight.bottleneck) == "pd-p"
    # At the planned rate the PD-P queue (fixed lengths: deterministic service) meets the SLO
    # exactly: the stage runs as busy as the objective lets it, no busier.
    service_s = 0.5 + 1e-4 * 8000
    wait_s = float(mean_wait_s(tight.lambda_max, tight.n_p, service_s, 0.0))
    assert service_s + wait_s == pytest.approx(2.0, rel=1e-9)


cases = st.fixed_dictionaries(
    {
        "samples": st.lists(st.integers(100, 30_000), min_size=1, max_size=30),
        "slo_s": st.floats(0.5, 20.0),
        "looser_by": st.floats(1.0, 4.0),
        "num_pd": st.integers(2, 12),
        "pd_per_token_s": st.floats(2e-5, 2e-4),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases)
def test_an_objective_never_raises_throughput_and_a_looser_one_never_lowers_it(
    fake_profile: FakeFactory, case: dict[str, Any]
) -> None:
    workload = Workload.synthetic(EmpiricalLengths.of(case["samples"]), FixedLength(200), "rand")
    base = Hardware(
        prfaas=Cluster(fake_profile("h200", prefill_per_token_s=5e-5), 2),
        pd=Cluster(fake_profile("h20", prefill_per_token_s=case["pd_per_token_s"]), case["num_pd"]),
        link_gbps=100,
        decode_slo_tokens_per_s=40,
    )
    free = plan(base, workload, STEP).deployments
    tight_slo, loose_slo = case["slo_s"], case["slo_s"] * case["looser_by"]
    try:
        tight = plan(replace(base, ttft_slo_s=tight_slo), workload, STEP).deployments
    except InfeasiblePlanError:
        return  # refused: nothing to compare (the refusal has its own test)
    loose = plan(replace(base, ttft_slo_s=loose_slo), workload, STEP).deployments
    for name in ("prfaas_pd", "homogeneous_pd", "equal_cost_homogeneous"):
        assert tight[name].lambda_max <= loose[name].lambda_max * (1 + 1e-9)
        assert loose[name].lambda_max <= free[name].lambda_max * (1 + 1e-9)
        for point in (tight[name], loose[name]):
            assert isinstance(point.n_p, int) and isinstance(point.n_d, int)
            assert point.n_p >= 1 and point.n_d >= 1


def test_the_scenario_file_carries_the_objective(tmp_path: Path) -> None:
    body = yaml.safe_load(
        (Path(__file__).parents[2] / "src/prfaas/planner/data/scenarios/paper-case-study.yaml")
        .read_text()
    )  # fmt: skip
    body["prefill"] = {"ttft_slo_s": 4.5}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(body))
    assert load_scenario(str(path)).hardware.ttft_slo_s == 4.5
    assert load_scenario("paper-case-study").hardware.ttft_slo_s is None
