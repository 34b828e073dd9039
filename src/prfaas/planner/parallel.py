"""The parallelism search: the instance shape of each cluster that maximises a deployment's
Lambda_max, under the scenario's timing source and within the memory model.

A shape is the GPUs per instance (1, 2, 4 or 8, whole instances of the cluster's GPUs) and the
split among tensor, expert and attention-data parallelism that the timing source can tell
apart (`specs.timing.parallelism_choices`: a GPU count for the roofline and measured points;
TP, EP and attention DP for MoE models under aiconfigurator). A shape whose weights and
activations do not fit its GPUs (`specs.memory`) is not a candidate, except the scenario's own
shape, which is always one: so the search never returns a plan worse than the scenario's fixed
instances under the same source (the property `tests/planner/test_parallel.py` checks).

Roles (the issue's "per role: PrfaaS prefill, PD-P, PD-D"): the PrfaaS cluster's prefill
instances take one shape; the PD cluster's GPUs are split between PD-P instances of one shape
and PD-D instances of another (`Hardware.pd_decode`), e.g. TP8 prefill beside attention-DP
decode. The consequence: the slow loop flips PD instances between the two roles
(docs/serving.md), which only instances of one shape can do, so a plan with two PD shapes is
one without role flips (`prfaas plan` says so, and the deployment file it writes turns them
off). The shared-shape pairs are planned first and a later pair must be strictly better, so a
plan with one PD shape wins a tie, and `per_role_pd=False` keeps to it. Every (PrfaaS shape,
PD-P shape, PD-D shape) triple is planned by `planner.plan` on one `StageModel` each; profiles
are built once per shape, so a source that memoises (aiconfigurator) times each length once.
Callers: `prfaas plan --search-parallelism` and benchmarks/aic_side_by_side.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.model import Cluster, Hardware
from prfaas.planner.optimise import TIE_TOLERANCE
from prfaas.planner.plan import DEPLOYMENTS, PlanReport, plan
from prfaas.specs.memory import instance_memory
from prfaas.specs.timing import TimingChoice, parallelism_choices, time_instance
from prfaas.workload.workload import Workload

#: GPUs per instance the search tries (an NVLink domain of the chips in the catalog).
GPUS_PER_INSTANCE = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class SearchedPlan:
    """The best plan found, the hardware (shapes) it was made on, how many shape pairs were
    planned, and the fallback lines of the shapes the source could not time."""

    report: PlanReport
    hardware: Hardware
    num_candidates: int
    timing_notes: tuple[str, ...]


def cluster_shapes(cluster: Cluster, choice: TimingChoice) -> tuple[list[Cluster], list[str]]:
    """The cluster itself, then every other shape of its GPUs that fits the memory model."""
    profile = cluster.profile
    model, chip, total = profile.model, profile.chip, cluster.num_gpus
    shapes, notes = [cluster], []
    for gpus in GPUS_PER_INSTANCE:
        if total % gpus:
            continue
        for parallelism in parallelism_choices(model, gpus, choice.source):
            timed = time_instance(model, chip, parallelism, choice)
            if timed.profile.source == profile.source and gpus == profile.gpus_per_instance:
                continue  # the cluster's own shape, already the first candidate
            memory = instance_memory(timed.profile)
            if memory.shortfall_bytes > 0:
                continue
            shapes.append(Cluster(timed.profile, total // gpus, memory))
            if timed.fallback is not None:
                notes.append(timed.fallback)
    return shapes, list(dict.fromkeys(notes))


def _pd_pairs(shapes: list[Cluster], per_role_pd: bool) -> list[tuple[Cluster, Cluster | None]]:
    """(PD-P shape, PD-D shape or None for the same): the shared shapes first, then, with
    `per_role_pd`, every pair of two different shapes."""
    pairs: list[tuple[Cluster, Cluster | None]] = [(shape, None) for shape in shapes]
    if per_role_pd:
        pairs += [(p, d) for i, p in enumerate(shapes) for j, d in enumerate(shapes) if i != j]
    return pairs


def search_parallelism(
    hardware: Hardware,
    workload: Workload,
    step_tokens: int,
    choice: TimingChoice,
    deployment: str = "prfaas_pd",
    *,
    per_role_pd: bool = True,
) -> SearchedPlan:
    """The (PrfaaS shape, PD-P shape, PD-D shape) whose `deployment` (one of `DEPLOYMENTS`)
    has the largest Lambda_max; ties keep the earlier candidate, so the scenario's own shapes
    win a tie, and one PD shape wins over two. `per_role_pd=False`: one PD shape only."""
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"unknown deployment {deployment!r} (known: {', '.join(DEPLOYMENTS)})")
    # Homogeneous PD has no PrfaaS instance: its plan does not depend on their shape.
    prfaas_shapes, prfaas_notes = (
        ([hardware.prfaas], [])
        if deployment == "homogeneous_pd"
        else cluster_shapes(hardware.prfaas, choice)
    )
    pd_shapes, pd_notes = cluster_shapes(hardware.pd, choice)
    best: tuple[float, PlanReport, Hardware] | None = None
    planned = 0
    for prfaas in prfaas_shapes:
        for pd, pd_decode in _pd_pairs(pd_shapes, per_role_pd):
            candidate = replace(hardware, prfaas=prfaas, pd=pd, pd_decode=pd_decode)
            try:
                report = plan(candidate, workload, step_tokens)
            except InfeasiblePlanError:
                continue
            planned += 1
            value = report.deployments[deployment].lambda_max
            if value <= 0:
                continue  # a baseline that misses the TTFT objective on this shape
            if best is None or value > best[0] * (1 + TIE_TOLERANCE):
                best = (value, report, candidate)
    if best is None:
        raise InfeasiblePlanError("no instance shape of either cluster gives a feasible plan")
    notes = [f"prfaas: {n}" for n in prfaas_notes] + [f"pd: {n}" for n in pd_notes]
    return SearchedPlan(best[1], best[2], planned, tuple(notes))
