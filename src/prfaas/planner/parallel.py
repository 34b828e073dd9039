"""The parallelism search: the instance shape of each cluster that maximises a deployment's
Lambda_max, under the scenario's timing source and within the memory model.

A shape is the GPUs per instance (1, 2, 4 or 8, whole instances of the cluster's GPUs) and the
split among tensor, attention-data and expert (tensor or expert) parallelism that the timing
source can time (`specs.timing.parallelism_choices`: the source is asked; a GPU count alone
for the roofline and measured points, every split it compiles under aiconfigurator, up to 16
per 8 GPUs for an MoE model). A shape whose weights and activations do not fit its GPUs
(`specs.memory`, attention-DP ranks each holding their copy) is not a candidate, except the
scenario's own shape, which is always one: so the search never returns a plan worse than the
scenario's fixed instances under the same source (the property `tests/planner/test_parallel.py`
checks).

Roles (the issue's "per role: PrfaaS prefill, PD-P, PD-D"): the PrfaaS cluster's prefill
instances take one shape; the PD cluster's GPUs are split between PD-P instances of one shape
and PD-D instances of another (`Hardware.pd_decode`), e.g. TP8 prefill beside attention-DP
decode. The consequence: the slow loop flips PD instances between the two roles
(docs/serving.md), which only instances of one shape can do, so a plan with two PD shapes is
one without role flips (`prfaas plan` says so, and the deployment file it writes turns them
off). The shared-shape pairs are planned first and a later pair must be strictly better, so a
plan with one PD shape wins a tie, and `per_role_pd=False` keeps to it.

Pruning per role, before the pairs are planned (`_undominated`): a shape is dropped for a role
when another shape with the same GPUs per instance (and, under an engine's pairing rule, the
same attention TP: `engine_rules.pairing_class`, so every partner the dropped shape could pair
with pairs with the other too) is at least as good for that role on everything the planner
reads of it, so the plan on the other is at least as good:

    prefill (PrfaaS, PD-P)  at every length the planner evaluates (the threshold grid's means
                            and the histogram's bins) both T_prefill(l), one prompt's latency
                            (its TTFT), and T_prefill(l) / concurrency, the time per prompt
                            of an instance running its attention-DP ranks at once (its rate)
    decode (PD-D)           requests/s per instance at BS_max (Eq. 5) under the TPOT SLO and
                            the memory bound (a shape that misses the SLO at batch 1 rates 0)
    one PD shape for both   both of the above

Equal shapes keep the earlier. Under a TTFT objective the queueing derate also reads the
spread (C_s^2) of the prefill times, which a pointwise faster shape may raise: the pruning is
exact without the objective and a heuristic with it; the scenario's own shape is never pruned,
so the never-worse property holds either way. Every (PrfaaS shape, PD-P shape, PD-D shape)
triple left is planned by `planner.plan` on one `StageModel` each; profiles are built once per
shape, so a source that memoises (aiconfigurator) times each length once.
Engine rules: under an engine's data (`--timing aic`) a candidate that engine cannot serve
disaggregated (`planner.engine_rules`: SGLang pairs prefill and decode of one attention TP
only) is not returned, by default: a plan a user cannot deploy on the engine is worse than a
slower one they can. The best candidate the rule removed is kept beside the plan
(`SearchedPlan.ruled_out`) so the caller can say what it would have been.
Callers: `prfaas plan --search-parallelism` and `prfaas simulate --search-parallelism` (both
through `ShapeSearch`, so the simulator runs the plan the search chose), and
benchmarks/aic_side_by_side.py.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace

import numpy as np

from prfaas.planner.engine_rules import pairing_class, plan_refusal
from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.model import Cluster, Hardware, decode_capacity
from prfaas.planner.optimise import TIE_TOLERANCE
from prfaas.planner.plan import DEPLOYMENTS, PlanReport, plan
from prfaas.planner.scenario import Scenario
from prfaas.specs.memory import instance_memory, startup_rule
from prfaas.specs.timing import TimingChoice, parallelism_choices, time_instance
from prfaas.workload.lengths import FloatArray
from prfaas.workload.workload import Workload

#: GPUs per instance the search tries (an NVLink domain of the chips in the catalog).
GPUS_PER_INSTANCE = (1, 2, 4, 8)


@dataclass(frozen=True, slots=True)
class RuledOut:
    """The best plan the engine's disaggregation rule removed, and why the engine cannot
    serve it (`planner.engine_rules`)."""

    report: PlanReport
    hardware: Hardware
    refusal: str


@dataclass(frozen=True, slots=True)
class SearchedPlan:
    """The best plan found, the hardware (shapes) it was made on, how many shape pairs were
    planned, the fallback lines of the shapes the source could not time, and the better plan
    the engine's rule removed (None where the rule removed none better than this one)."""

    report: PlanReport
    hardware: Hardware
    num_candidates: int
    timing_notes: tuple[str, ...]
    ruled_out: RuledOut | None = None


def cluster_shapes(cluster: Cluster, choice: TimingChoice) -> tuple[list[Cluster], list[str]]:
    """The cluster itself, then every other shape of its GPUs that fits the memory model."""
    profile = cluster.profile
    model, chip, total = profile.model, profile.chip, cluster.num_gpus
    shapes, notes = [cluster], []
    for gpus in GPUS_PER_INSTANCE:
        if total % gpus:
            continue
        for parallelism in parallelism_choices(model, chip, gpus, choice):
            timed = time_instance(model, chip, parallelism, choice)
            if timed.profile.source == profile.source and gpus == profile.gpus_per_instance:
                continue  # the cluster's own shape, already the first candidate
            memory = instance_memory(timed.profile, parallelism.dp, startup_rule(choice))
            if memory.shortfall_bytes > 0:
                continue
            shapes.append(Cluster(timed.profile, total // gpus, memory, parallelism))
            if timed.fallback is not None:
                notes.append(timed.fallback)
    return shapes, list(dict.fromkeys(notes))


def _prefill_costs(shapes: list[Cluster], workload: Workload, step_tokens: int) -> FloatArray:
    """T_prefill of each shape (rows) at every length the planner evaluates, then the same
    over the shape's prefill concurrency (columns): its latency and its time per prompt."""
    histogram = workload.uncached_input.histogram(step_tokens)
    split = histogram.split()
    lengths = np.concatenate(
        [histogram.mean_tokens, split.long_mean_tokens, split.short_mean_tokens]
    )
    tokens = sorted({max(1, round(float(x))) for x in lengths[np.isfinite(lengths)]})
    latency = np.array([[c.profile.prefill_s(n) for n in tokens] for c in shapes]).reshape(
        len(shapes), len(tokens)
    )
    concurrency = np.array([[c.profile.prefill_concurrency] for c in shapes], dtype=np.float64)
    return np.hstack([latency, latency / concurrency.reshape(len(shapes), 1)])


def _decode_costs(shapes: list[Cluster], hardware: Hardware, workload: Workload) -> FloatArray:
    """Minus each shape's PD-D requests/s per instance (Eq. 5; 0 where it misses the SLO)."""
    rates = []
    for cluster in shapes:
        try:
            capacity = decode_capacity(
                hardware.timed(cluster.profile),
                hardware.decode_slo_tokens_per_s,
                workload.mean_decode_context_tokens,
                workload.mean_input_tokens + workload.mean_output_tokens,
                None if cluster.memory is None else cluster.memory.kv_capacity_bytes,
            )
        except InfeasiblePlanError:
            rates.append(0.0)
            continue
        rates.append(capacity.rate_per_instance(workload.mean_output_tokens))
    return -np.array(rates).reshape(len(shapes), 1)


def _undominated(
    shapes: list[Cluster], costs: FloatArray, classes: list[Hashable]
) -> list[Cluster]:
    """The shapes no other shape of the same class (`_classes`: GPUs per instance, and what
    the engine's rule pairs by) dominates (costs no higher in any column; lower in one, or
    equal and earlier). The first shape, the scenario's own, is always kept. Dominance is
    transitive, so a dropped shape always has a kept dominator."""

    def dominated(j: int) -> bool:
        for i in range(len(shapes)):
            if i == j or classes[i] != classes[j]:
                continue
            if np.all(costs[i] <= costs[j]) and (i < j or np.any(costs[i] < costs[j])):
                return True
        return False

    return [shape for j, shape in enumerate(shapes) if j == 0 or not dominated(j)]


def _classes(shapes: list[Cluster], choice: TimingChoice, engine_rules: bool) -> list[Hashable]:
    """Per shape, what it is pruned among: its GPUs per instance, and under an engine's rule
    what that rule pairs by (`engine_rules.pairing_class`)."""
    return [
        (
            shape.profile.gpus_per_instance,
            pairing_class(choice, shape.split) if engine_rules else None,
        )
        for shape in shapes
    ]


@dataclass(frozen=True, slots=True)
class _RoleShapes:
    """The PD cluster's candidates per role after pruning: PD-P, PD-D, and one shape for both."""

    prefill: list[Cluster]
    decode: list[Cluster]
    shared: list[Cluster]

    def pairs(self, per_role_pd: bool) -> list[tuple[Cluster, Cluster | None]]:
        """(PD-P shape, PD-D shape or None for the same): the shared shapes first, then, with
        `per_role_pd`, every pair of two different shapes."""
        pairs: list[tuple[Cluster, Cluster | None]] = [(shape, None) for shape in self.shared]
        if per_role_pd:
            pairs += [(p, d) for p in self.prefill for d in self.decode if p is not d]
        return pairs


def _pd_roles(
    shapes: list[Cluster],
    hardware: Hardware,
    workload: Workload,
    step_tokens: int,
    classes: list[Hashable],
) -> _RoleShapes:
    prefill, decode = (
        _prefill_costs(shapes, workload, step_tokens),
        _decode_costs(shapes, hardware, workload),
    )
    return _RoleShapes(
        prefill=_undominated(shapes, prefill, classes),
        decode=_undominated(shapes, decode, classes),
        shared=_undominated(shapes, np.hstack([prefill, decode]), classes),
    )


def search_parallelism(
    hardware: Hardware,
    workload: Workload,
    step_tokens: int,
    choice: TimingChoice,
    deployment: str = "prfaas_pd",
    *,
    per_role_pd: bool = True,
    engine_rules: bool = True,
) -> SearchedPlan:
    """The (PrfaaS shape, PD-P shape, PD-D shape) whose `deployment` (one of `DEPLOYMENTS`)
    has the largest Lambda_max; ties keep the earlier candidate, so the scenario's own shapes
    win a tie, and one PD shape wins over two. `per_role_pd=False`: one PD shape only.
    `engine_rules` (the default): a candidate the engine `choice` names cannot serve
    disaggregated is not returned (`planner.engine_rules`; the scenario's own shapes
    included), and the best one it removed, if better, is reported beside the plan."""
    if deployment not in DEPLOYMENTS:
        raise ValueError(f"unknown deployment {deployment!r} (known: {', '.join(DEPLOYMENTS)})")
    # Homogeneous PD has no PrfaaS instance: its plan does not depend on their shape.
    prfaas_shapes, prfaas_notes = (
        ([hardware.prfaas], [])
        if deployment == "homogeneous_pd"
        else cluster_shapes(hardware.prfaas, choice)
    )
    prfaas_shapes = _undominated(
        prfaas_shapes,
        _prefill_costs(prfaas_shapes, workload, step_tokens),
        _classes(prfaas_shapes, choice, engine_rules),
    )
    pd_shapes, pd_notes = cluster_shapes(hardware.pd, choice)
    classes = _classes(pd_shapes, choice, engine_rules)
    roles = _pd_roles(pd_shapes, hardware, workload, step_tokens, classes)
    best: _Best | None = None
    removed: _Best | None = None  # the best candidate the engine's rule refused
    planned = 0
    for prfaas in prfaas_shapes:
        for pd, pd_decode in roles.pairs(per_role_pd):
            candidate = replace(hardware, prfaas=prfaas, pd=pd, pd_decode=pd_decode)
            try:
                report = plan(candidate, workload, step_tokens)
            except InfeasiblePlanError:
                continue
            planned += 1
            value = report.deployments[deployment].lambda_max
            if value <= 0:
                continue  # a baseline that misses the TTFT objective on this shape
            refusal = plan_refusal(candidate, choice, deployment) if engine_rules else None
            if refusal is None:
                best = _better(best, _Best(value, report, candidate, ""))
            else:
                removed = _better(removed, _Best(value, report, candidate, refusal))
    if best is None:
        why = "" if removed is None else f" that {choice.engine} can serve ({removed.refusal})"
        raise InfeasiblePlanError(f"no instance shape of either cluster gives a feasible plan{why}")
    notes = [f"prfaas: {n}" for n in prfaas_notes] + [f"pd: {n}" for n in pd_notes]
    ruled_out = (
        RuledOut(removed.report, removed.hardware, removed.refusal)
        if removed is not None and removed.value > best.value * (1 + TIE_TOLERANCE)
        else None
    )
    return SearchedPlan(best.report, best.hardware, planned, tuple(notes), ruled_out)


@dataclass(frozen=True, slots=True)
class _Best:
    value: float
    report: PlanReport
    hardware: Hardware
    refusal: str


def _better(best: _Best | None, candidate: _Best) -> _Best:
    """The candidate if it beats `best` by more than the tie tolerance (earlier wins ties)."""
    if best is None or candidate.value > best.value * (1 + TIE_TOLERANCE):
        return candidate
    return best


@dataclass(frozen=True, slots=True)
class ShapeSearch:
    """The parallelism search as a scenario's hosts ask it: `prfaas plan` plans and `prfaas
    simulate` runs the scenario it returns, so both see the same shapes. `per_role_pd=False`
    (`--one-pd-shape`) keeps PD-P and PD-D in one shape, so the slow loop can flip roles;
    `engine_rules=False` (`--no-engine-rules`) pairs shapes the engine cannot serve."""

    per_role_pd: bool = True
    engine_rules: bool = True

    def apply(self, scenario: Scenario) -> Scenario:
        """`scenario` on the instance shapes that maximise PrfaaS-PD, its timing notes joined
        by the fallback lines of the shapes the source could not time and, where the engine's
        rule removed a better plan, the line saying what it would have been."""
        found = search_parallelism(
            scenario.hardware,
            scenario.workload,
            scenario.threshold_step_tokens,
            scenario.timing,
            per_role_pd=self.per_role_pd,
            engine_rules=self.engine_rules,
        )
        rule = ruled_out_line(found)
        notes = scenario.timing_notes + found.timing_notes + (() if rule is None else (rule,))
        return replace(scenario, hardware=found.hardware, timing_notes=tuple(dict.fromkeys(notes)))


def _shapes(hw: Hardware) -> str:
    return (
        f"PrfaaS {hw.prfaas.split.label()}, PD-P {hw.pd.split.label()}, "
        f"PD-D {hw.decode_cluster.split.label()}"
    )


def ruled_out_line(found: SearchedPlan, deployment: str = "prfaas_pd") -> str | None:
    """One line when the engine's rule removed a better plan: what it would have been."""
    removed = found.ruled_out
    if removed is None:
        return None
    theirs = removed.report.deployments[deployment].lambda_max
    ours = found.report.deployments[deployment].lambda_max
    return (
        f"engine rule: the best plan without it ({_shapes(removed.hardware)}: "
        f"{theirs:.2f} req/s against {ours:.2f}) is not deployable: {removed.refusal} "
        "(--no-engine-rules plans it anyway)"
    )
