"""`policy:` in the deployment file (issue 25, point 5): validated by name, refused at preflight
when the instances lack what it routes to, and assembled from the same schema (same defaults)
as the simulator's."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.planner import load_scenario
from prfaas.planner.scenario import AdmissionFile, LinkFile, RebalanceFile, SimulationFile
from prfaas.scheduler import GlobalScheduler, RebalanceConfig, SchedulerConfig, assemble
from prfaas.serve.config.admission_spec import AdmissionSpec
from prfaas.serve.config.deployment import (
    InstanceRole,
    InstanceSpec,
    RebalanceSpec,
    RouterSpec,
    default_deployment,
    load_deployment,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch.preflight import Scope, check_deployment
from prfaas.serve.router.live_scheduler import scheduler_setup as live_setup
from prfaas.sim.config import Deployment as SimDeployment
from prfaas.sim.config import RunConfig
from prfaas.sim.runner import scheduler_setup as sim_setup

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
HARDWARE = load_scenario("paper-case-study").hardware
FILE = """\
model: tiny-qwen3-next
policy: %s
router: {port: 0}
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas}
  - {name: pdp-0, role: pd-prefill, cluster: pd}
  - {name: pdd-0, role: pd-decode, cluster: pd}
"""


def test_an_unknown_policy_is_a_one_line_error_naming_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(FILE % "prefill-first")
    with pytest.raises(DeploymentError) as caught:
        load_deployment(path)
    [line] = caught.value.problems
    assert line.startswith(f"{path}: policy: ")
    assert (
        "unknown policy 'prefill-first' (known: prfaas, homogeneous, naive, fixed, dynamo)" in line
    )
    path.write_text(FILE % "dynamo")
    assert load_deployment(path).policy == "dynamo"
    assert default_deployment().policy == "prfaas"


def _only(*roles: InstanceRole) -> tuple[InstanceSpec, ...]:
    return tuple(
        InstanceSpec(
            name=f"i{k}",
            role=role,
            cluster="prfaas" if role is InstanceRole.PRFAAS_PREFILL else "pd",
        )
        for k, role in enumerate(roles)
    )


@pytest.mark.parametrize(
    ("policy", "roles", "lacking"),
    [
        ("prfaas", (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE), []),
        ("naive", (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE), ["prfaas-prefill"]),
        ("homogeneous", (InstanceRole.PRFAAS_PREFILL, InstanceRole.PD_DECODE), ["pd-prefill"]),
        ("fixed", (InstanceRole.PRFAAS_PREFILL, InstanceRole.PD_DECODE), ["pd-prefill"]),
        ("dynamo", (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE), ["prfaas-prefill"]),
        ("homogeneous", (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE), []),
        ("naive", (InstanceRole.PRFAAS_PREFILL, InstanceRole.PD_DECODE), []),
    ],
)
def test_preflight_refuses_a_policy_whose_prefill_roles_are_missing(
    policy: str, roles: tuple[InstanceRole, ...], lacking: list[str]
) -> None:
    deployment = default_deployment().model_copy(
        update={"policy": policy, "router": RouterSpec(port=0), "instances": _only(*roles)}
    )
    assert check_deployment(deployment, Scope.ALL, secret_generated=True) == [
        f"policy: {policy} routes prefills to {role} instances and the deployment has none"
        for role in lacking
    ]
    assert (
        check_deployment(deployment, Scope.INSTANCE, instance_name="i0", secret_generated=True)
        == []
    )  # no routing


@pytest.mark.parametrize(
    ("name", "policy"),
    [("prfaas-pd", "prfaas"), ("homogeneous", "homogeneous"), ("naive", "naive")],
)
def test_the_scaled_case_study_files_name_their_policy(name: str, policy: str) -> None:
    deployment = load_deployment(CONFIGS / f"case-study-{name}.yaml")
    assert deployment.policy == policy
    live = deployment.model_copy(update={"router": RouterSpec(port=0)})
    assert not [
        p
        for p in check_deployment(live, Scope.ALL, secret_generated=True)
        if p.startswith("policy")
    ]


def _shape(scheduler: GlobalScheduler) -> tuple[object, ...]:
    """What a scheduler's behaviour is built from (its timing models aside)."""
    admission = scheduler.admission.config if scheduler.admission else None
    loop = scheduler.rebalancer.config if scheduler.rebalancer else None
    return (scheduler.policy.name, scheduler.threshold_tokens, admission, loop)


def _run_config(policy: str, simulation: SimulationFile) -> RunConfig:
    return RunConfig(
        policy=policy,
        hardware=HARDWARE,
        deployment=SimDeployment(1, 1, 1, 4096),
        simulation=simulation,
        link=LinkFile(),
        capacity_steps_gbps=(),
        decode_max_batch=8,
        decode_kv_capacity_bytes=1e12,
        block_tokens=512,
        plan_mode="pinned",
    )


@pytest.mark.parametrize("policy", ["prfaas", "homogeneous", "naive", "fixed", "dynamo"])
def test_the_same_settings_give_the_same_scheduler_in_the_simulator_and_live(
    policy: str,
) -> None:
    """A scenario and a deployment file saying the same give one scheduler, and saying nothing
    they give the same one too: one schema, one set of defaults."""
    deployment = default_deployment().model_copy(
        update={"policy": policy, "threshold_tokens": 4096}
    )
    simulation = SimulationFile(
        policy=policy, slo={"ttft_s": AdmissionSpec().ttft_slo_s}, rebalance=RebalanceFile()
    )
    assert isinstance(deployment.router.admission, AdmissionFile)
    config = SchedulerConfig(HARDWARE.prfaas.profile, HARDWARE.pd.profile)
    sim = assemble(sim_setup(_run_config(policy, simulation)), config, HARDWARE)
    live = assemble(live_setup(deployment), config, HARDWARE)
    assert _shape(sim) == _shape(live)
    if policy == "prfaas":
        assert sim.rebalancer is not None
        assert sim.rebalancer.config == RebalanceConfig.of(HARDWARE, RebalanceSpec())
        assert (sim.rebalancer.config.period_s, sim.rebalancer.config.min_samples) == (120, 200)
    tuned = {"period_s": 30.0, "min_samples": 20, "step_tokens": 64}
    sim_tuned = simulation.model_copy(
        update={"rebalance": RebalanceFile(**tuned), "admission": AdmissionFile(mode="defer")}
    )
    live_tuned = deployment.model_copy(
        update={
            "rebalance": RebalanceSpec(**tuned),
            "router": RouterSpec(admission=AdmissionSpec(mode="defer")),
        }
    )
    assert _shape(assemble(sim_setup(_run_config(policy, sim_tuned)), config, HARDWARE)) == (
        _shape(assemble(live_setup(live_tuned), config, HARDWARE))
    )
