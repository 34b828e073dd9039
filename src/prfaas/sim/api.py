"""One call from a scenario to a result: resolve, draw arrivals, simulate, summarise.

    run = simulate_scenario("paper-case-study", policy="prfaas")
    run.report.summary.to_json()

`--compare` runs several policies on the very same arrivals (same seed, same trace slice).
With a `ShapeSearch` (`--search-parallelism`) the scenario is first put on the instance shapes
the parallelism search chose, as `prfaas plan --search-parallelism` plans it, so the plan
simulated is the plan reported; `simulate_resolved` runs an already resolved scenario.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from prfaas.planner.parallel import ShapeSearch
from prfaas.planner.scenario import (
    ArrivalsFile,
    Scenario,
    ScenarioFile,
    TraceFile,
    WorkloadFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.sim.arrivals import SimRequest, synthetic_arrivals, trace_arrivals
from prfaas.sim.config import RunConfig, build_run_config, chosen_plan
from prfaas.sim.report import SimReport, build_report
from prfaas.sim.runner import Simulator
from prfaas.specs.errors import SpecError
from prfaas.workload.trace import read_mooncake_trace


@dataclass(frozen=True, slots=True)
class SimRun:
    config: RunConfig
    report: SimReport


def _arrivals(body: ScenarioFile, base_dir: Path, seed: int) -> list[SimRequest]:
    arrivals = body.arrivals or ArrivalsFile()
    workload = body.workload
    if workload.trace is not None:
        trace = read_mooncake_trace(base_dir / workload.trace.path, workload.trace.block_tokens)
        if arrivals.process != "trace":
            raise SpecError("arrivals: a trace workload replays its timestamps (process: trace)")
        return trace_arrivals(trace, arrivals.time_scale, arrivals.num_requests)
    if workload.input is None or workload.output is None:
        raise SpecError("workload: a synthetic simulation needs input and output lengths")
    if arrivals.process == "trace":
        raise SpecError("arrivals: process trace needs a trace workload (--trace)")
    return synthetic_arrivals(arrivals, workload.input, workload.output, seed)


def scenario_arrivals(body: ScenarioFile, base_dir: Path) -> list[SimRequest]:
    """The arrivals `simulate_body` replays for `body` (drawn with the scenario's seed)."""
    seed = body.simulation.seed if body.simulation is not None else 0
    return _arrivals(body, base_dir, seed)


def with_trace(body: ScenarioFile, trace: Path) -> ScenarioFile:
    """Replace the workload by the whole trace replayed at its timestamps (cache capacity
    unbounded for the planner's view; the simulator's pools have their configured size). A
    synthetic `num_requests` of the scenario does not cut the trace short."""
    workload = WorkloadFile(trace=TraceFile(path=str(trace.resolve()), cache_capacity_blocks=None))
    arrivals = (body.arrivals or ArrivalsFile()).model_copy(
        update={"process": "trace", "num_requests": None}
    )
    return body.model_copy(update={"workload": workload, "arrivals": arrivals})


def simulate_body(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    policies: list[str | None],
    progress: Callable[[str, float], None] | None = None,
    *,
    search: ShapeSearch | None = None,
) -> list[SimRun]:
    scenario = build_scenario(body, base_dir, where)
    if search is not None:
        scenario = search.apply(scenario)
    return simulate_resolved(scenario, body, base_dir, policies, progress)


def simulate_resolved(
    scenario: Scenario,
    body: ScenarioFile,
    base_dir: Path,
    policies: list[str | None],
    progress: Callable[[str, float], None] | None = None,
) -> list[SimRun]:
    """`body`'s arrivals through `scenario` (built from `body`, its shapes perhaps searched)."""
    seed = body.simulation.seed if body.simulation is not None else 0
    requests = _arrivals(body, base_dir, seed)
    slo = body.simulation.slo if body.simulation is not None else None
    chosen = chosen_plan(scenario, body, base_dir)  # once for every policy
    runs = []
    for policy in policies:
        config = build_run_config(scenario, body, base_dir, policy, chosen)
        tick = None if progress is None else partial(progress, config.policy)
        result = Simulator(config, requests).run(tick)
        runs.append(SimRun(config, build_report(config, result, slo)))
    return runs


def simulate_scenario(ref: str, policy: str | None = None, trace: Path | None = None) -> SimRun:
    body, base_dir = read_scenario_file(ref)
    if trace is not None:
        body = with_trace(body, trace)
    return simulate_body(body, base_dir, Path(ref).name, [policy])[0]
