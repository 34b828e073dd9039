"""`prfaas plan --pool-aware`: the plan on the hits the deployment's pools would see
(scheduler.hit_model) beside the ideal replay's, for PrfaaS-PD and homogeneous PD."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table

from prfaas.cli.output import Output
from prfaas.kvcache.cache import CacheConfig
from prfaas.planner.scenario import Scenario, ScenarioFile
from prfaas.scheduler.hit_model import PoolAwarePoint, pool_aware_plan
from prfaas.specs.errors import SpecError
from prfaas.workload.trace import read_mooncake_trace


def pool_aware_points(
    body: ScenarioFile, base_dir: Path, scenario: Scenario
) -> list[PoolAwarePoint]:
    trace = body.workload.trace
    sim = body.simulation
    if trace is None:
        raise SpecError("--pool-aware replays a trace: give --trace (or a trace workload)")
    if sim is None or sim.prefix_cache_gib <= 0:
        raise SpecError("--pool-aware needs a prefix pool: simulation.prefix_cache_gib > 0")
    cache = CacheConfig.for_model(
        scenario.hardware.pd.profile.model,
        block_tokens=trace.block_tokens,
        capacity_bytes=int(sim.prefix_cache_gib * 2**30),
    )
    requests = read_mooncake_trace(base_dir / trace.path)
    return pool_aware_plan(requests, scenario.hardware, cache, scenario.threshold_step_tokens)


def points_json(points: list[PoolAwarePoint]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]


def render(points: list[PoolAwarePoint], out: Output) -> None:
    table = Table(title="Pool-aware plan (per-instance pools, snapshot policy, placement)")
    for name in ("deployment", "hit ideal", "hit predicted", "Lambda_max ideal", "Lambda_max"):
        table.add_column(name, justify="right")
    table.add_column("N_prfaas / N_p / N_d, t", justify="right")
    for p in points:
        t = "-" if p.threshold_tokens is None else str(p.threshold_tokens)
        table.add_row(
            p.deployment,
            f"{p.ideal_hit_fraction:.1%}",
            f"{p.predicted_hit_fraction:.1%}",
            f"{p.ideal_lambda_max:.3f}",
            f"{p.lambda_max:.3f}",
            f"{p.n_prfaas} / {p.n_p} / {p.n_d}, {t}",
        )
    out.table(table)
