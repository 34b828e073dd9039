"""The plan a scenario gets, and the trace mode behind each of its figures (issue 27).

    chosen = plan_scenario(scenario, body, base_dir)          # pool-aware on a trace
    chosen.report.deployments["prfaas_pd"], chosen.modes["prfaas_pd"]

Three modes, one per source of the uncached lengths the planner plans on:

    synthetic    no trace: the scenario's length distributions (the paper's case study)
    pool-aware   a trace replayed through the deployment's own per-instance pools
                 (`hit_model.pool_aware_plan`, `simulation.prefix_cache_gib` each; 0: no pool,
                 no hits, as the simulator has none), with the disk tier below each pool
                 that `simulation.prefix_cache_disk_gib` configures; the default for a trace
    ideal        a trace replayed through one pooled LRU cache of `cache_capacity_blocks`
                 (`workload.prefix`): an upper bound on hits, opted into explicitly

The pool-aware replay covers PrfaaS-PD and homogeneous PD (`POOL_AWARE_DEPLOYMENTS`); the
other two baselines keep the ideal replay and say so in `modes`. `prfaas plan` prints the mode
beside every figure and `prfaas simulate` runs the deployment this plan chose, so the figure
reported and the deployment simulated are the same (docs/planner.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from prfaas.kvcache.cache import CacheConfig
from prfaas.planner.plan import DEPLOYMENTS, PlanReport, plan
from prfaas.planner.scenario import Scenario, ScenarioFile
from prfaas.scheduler.hit_model import PoolAwarePoint, pool_aware_plan
from prfaas.scheduler.tiers import lower_tier_of
from prfaas.workload.trace import read_mooncake_trace
from prfaas.workload.workload import Workload


class TraceMode(StrEnum):
    SYNTHETIC = "synthetic"
    POOL_AWARE = "pool-aware"
    IDEAL = "ideal"


@dataclass(frozen=True, slots=True)
class ScenarioPlan:
    """The reported plan: deployments (pool-aware ones in place of the ideal replay's), the
    mode behind each, and the pool-aware points (empty unless pools were replayed)."""

    report: PlanReport
    modes: dict[str, TraceMode]
    pool_points: tuple[PoolAwarePoint, ...] = ()


def _all(mode: TraceMode) -> dict[str, TraceMode]:
    return dict.fromkeys(DEPLOYMENTS, mode)


def plan_scenario(
    scenario: Scenario, body: ScenarioFile, base_dir: Path, *, pool_aware: bool = True
) -> ScenarioPlan:
    """The plan of `scenario` in the mode its workload and `pool_aware` select (module
    docstring); `body` and `base_dir` locate the trace and size the pools."""
    step = scenario.threshold_step_tokens
    hardware = scenario.hardware
    trace = body.workload.trace
    if trace is None:
        return ScenarioPlan(plan(hardware, scenario.workload, step), _all(TraceMode.SYNTHETIC))
    if not pool_aware:
        return ScenarioPlan(plan(hardware, scenario.workload, step), _all(TraceMode.IDEAL))
    requests = read_mooncake_trace(base_dir / trace.path, trace.block_tokens)
    pool_gib = body.simulation.prefix_cache_gib if body.simulation is not None else 0.0
    if pool_gib <= 0:
        no_pool = Workload.from_trace(requests, 0, "no prefix pool", trace.block_tokens)
        return ScenarioPlan(plan(hardware, no_pool, step), _all(TraceMode.POOL_AWARE))
    cache = CacheConfig.for_model(
        hardware.pd.profile.model,
        block_tokens=trace.block_tokens,
        capacity_bytes=int(pool_gib * 2**30),
        lower_tier=lower_tier_of(body.simulation),
    )
    points = tuple(pool_aware_plan(requests, hardware, cache, step))
    ideal = plan(hardware, scenario.workload, step)
    deployments = dict(ideal.deployments) | {p.deployment: p.point for p in points}
    modes = _all(TraceMode.IDEAL) | dict.fromkeys(
        (p.deployment for p in points), TraceMode.POOL_AWARE
    )
    return ScenarioPlan(dataclasses.replace(ideal, deployments=deployments), modes, points)
