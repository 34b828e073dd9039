"""A simulation's resolved configuration: deployment, policy, link and arrivals, frozen.

`build_run_config` turns a scenario (the planner's YAML, with its optional `simulation:`,
`arrivals:` and `link:` sections) and a policy name into a `RunConfig`. The deployment of each
policy is the planner's for its deployment kind (paper Table 6): PrfaaS-PD's optimum (N_prfaas,
N_p, N_d, t) for prfaas, fixed and dynamo; homogeneous PD with as many PD-chip instances as
PrfaaS-PD has GPUs for homogeneous; all PD instances decoding for naive. The plan is the one
`prfaas plan` reports (`scheduler.trace_plan`): on a trace, pool-aware unless
`simulation.plan_mode: ideal`, so the deployment simulated is the deployment reported. Each
decode instance holds at most the planner's latency bound of requests and the KV capacity of
the memory model (`specs.memory`, as the planner's memory bound), unless
`simulation.decode_kv_gib` sets it.

A plan whose PD-D instances have their own shape (`Hardware.pd_decode`, from the parallelism
search) runs as planned: PD-P instances prefill with the PD-P shape's profile, PD-D instances
decode with the PD-D shape's, whose latency bound and KV capacity the plan's `decode` holds
already. Instances of two shapes cannot flip roles, so such a run has the slow loop off (as
`prfaas up` runs the deployment file of that plan, docs/planner.md) and says so in `notes`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

from prfaas.planner.model import Hardware
from prfaas.planner.plan import PlanReport
from prfaas.planner.scenario import LinkFile, Scenario, ScenarioFile, SimulationFile
from prfaas.scheduler.trace_plan import ScenarioPlan, plan_scenario
from prfaas.specs.errors import SpecError, SpecFileError

#: What a run of a plan with two PD shapes gives up (reported in `RunConfig.notes`).
TWO_PD_SHAPES_NOTE = (
    "PD-P and PD-D have different shapes: their instances cannot flip roles, so the slow "
    "loop is off (t and the roles stay as planned, as `prfaas up` runs this plan)"
)

DEPLOYMENT_OF_POLICY = {
    "prfaas": "prfaas_pd",
    "fixed": "prfaas_pd",
    "dynamo": "prfaas_pd",
    "homogeneous": "homogeneous_pd",
    "naive": "naive_heterogeneous",
}


@dataclass(frozen=True, slots=True)
class Deployment:
    n_prfaas: int
    n_p: int
    n_d: int
    threshold_tokens: int


@dataclass(frozen=True, slots=True)
class RunConfig:
    """`hardware`: the profiles each role is timed by and the clusters the slow loop plans
    with; how many instances each role runs is `deployment`'s."""

    policy: str
    hardware: Hardware
    deployment: Deployment
    simulation: SimulationFile
    link: LinkFile
    capacity_steps_gbps: tuple[tuple[float, float], ...]
    decode_max_batch: int  # the latency bound of BS_max; memory binds through the bytes below
    decode_kv_capacity_bytes: float  # per decode instance (specs.memory; inf: weights do not fit)
    block_tokens: int
    plan_mode: str  # the trace mode of the plan whose deployment runs, or "pinned"
    notes: tuple[str, ...] = ()  # what the run changed of the scenario, one line each


def _read_capacity_file(path: Path) -> list[tuple[float, float]]:
    try:
        with path.open() as handle:
            rows = [r for r in csv.reader(handle) if r and not r[0].startswith("#")]
    except OSError as err:
        raise SpecFileError(f"{path}: cannot read capacity file ({err.strerror})") from None
    try:
        return [(float(t), float(g)) for t, g in rows if t.strip() != "time_s"]
    except ValueError:
        raise SpecFileError(f"{path}: rows must be time_s,gbps") from None


def _kind(policy: str) -> str:
    try:
        return DEPLOYMENT_OF_POLICY[policy]
    except KeyError:
        known = ", ".join(DEPLOYMENT_OF_POLICY)
        raise SpecError(f"unknown policy {policy!r} (known: {known})") from None


def deployment_for(policy: str, report: PlanReport, body: SimulationFile) -> Deployment:
    if body.deployment is not None:
        d = body.deployment
        t = d.threshold_tokens
        best_t = report.deployments["prfaas_pd"].threshold_tokens
        return Deployment(d.n_prfaas, d.n_p, d.n_d, t if t is not None else best_t or 0)
    point = report.deployments[_kind(policy)]
    best_t = report.deployments["prfaas_pd"].threshold_tokens or 0
    return Deployment(point.n_prfaas, point.n_p, point.n_d, best_t)


def _run_hardware(
    hw: Hardware, deployment: Deployment, sim: SimulationFile
) -> tuple[Hardware, SimulationFile, tuple[str, ...]]:
    """The hardware a run times its instances by, the simulation settings it runs with and
    the notes saying what changed: one PD shape (a `pd_decode` equal to `pd` is one), its PD
    cluster is the deployment's PD instances (the slow loop's N_p + N_d); two, the plan's
    shapes as the search left them (each role's count is the deployment's), slow loop off."""
    prfaas = replace(hw.prfaas, num_instances=deployment.n_prfaas)
    if hw.pd_decode is not None and hw.pd_decode != hw.pd:
        off = sim.model_copy(update={"rebalance": None})
        return replace(hw, prfaas=prfaas), off, (TWO_PD_SHAPES_NOTE,)
    hardware = Hardware(
        prfaas=prfaas,
        pd=replace(hw.pd, num_instances=deployment.n_p + deployment.n_d),
        link_gbps=hw.link_gbps,
        decode_slo_tokens_per_s=hw.decode_slo_tokens_per_s,
    )
    return hardware, sim, ()


def chosen_plan(scenario: Scenario, body: ScenarioFile, base_dir: Path) -> ScenarioPlan:
    """The plan `prfaas plan` reports for this scenario in the simulation's `plan_mode`."""
    sim = body.simulation or SimulationFile()
    return plan_scenario(scenario, body, base_dir, pool_aware=sim.plan_mode == "pool-aware")


def build_run_config(
    scenario: Scenario,
    body: ScenarioFile,
    base_dir: Path,
    policy: str | None,
    chosen: ScenarioPlan | None = None,
) -> RunConfig:
    """`chosen`: the scenario's plan when the caller has it already (`chosen_plan`)."""
    sim = body.simulation or SimulationFile()
    link = body.link or LinkFile()
    name = policy or sim.policy
    chosen = chosen or chosen_plan(scenario, body, base_dir)
    report = chosen.report
    deployment = deployment_for(name, report, sim)
    mode = "pinned" if sim.deployment is not None else str(chosen.modes[_kind(name)])
    steps = [(s.at_s, s.gbps) for s in link.capacity_steps]
    if link.capacity_file is not None:
        steps += _read_capacity_file(base_dir / link.capacity_file)
    hardware, sim, notes = _run_hardware(scenario.hardware, deployment, sim)
    trace = body.workload.trace
    if sim.decode_kv_gib is not None:
        kv_capacity = sim.decode_kv_gib * 2**30
    else:
        modelled = report.decode.kv_capacity_bytes
        kv_capacity = float("inf") if modelled is None else modelled
    return RunConfig(
        policy=name,
        hardware=hardware,
        deployment=deployment,
        simulation=sim,
        link=link,
        capacity_steps_gbps=tuple(sorted(steps)),
        decode_max_batch=report.decode.latency_batch_size,
        decode_kv_capacity_bytes=kv_capacity,
        plan_mode=mode,
        notes=notes,
        block_tokens=trace.block_tokens if trace is not None else 512,
    )
