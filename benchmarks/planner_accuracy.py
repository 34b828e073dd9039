"""Planner accuracy (issue 15, docs/benchmarks.md): the pool-aware planner's Lambda_max against
the simulated saturation throughput of the very deployment it planned, for PrfaaS-PD and
homogeneous PD, on a trace. Prints JSON.

    .venv/bin/python benchmarks/planner_accuracy.py --trace TRACE [--num-requests 4000 --offset 0]
    .venv/bin/python benchmarks/planner_accuracy.py --prefix-heavy 4000 [--seed 0]

Simulated saturation (docs/simulation.md, planner accuracy): the planned deployment (pinned,
so the simulator runs exactly the planner's N_prfaas / N_p / N_d and t) replays the trace at
offered rates of `--load-factors` x the planner's Lambda_max, admission off; its saturation
throughput is the largest completion rate over that sweep (`sim.sweep.saturation`, the
existing sweep's method), and `saturated` says whether some load was completed >= 10% short
of the offered rate (else the largest rate is only a lower bound).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from prfaas.kvcache.cache import CacheConfig
from prfaas.planner.scenario import (
    DeploymentFile,
    ScenarioFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.scheduler.hit_model import PoolAwarePoint, pool_aware_plan
from prfaas.sim.api import with_trace
from prfaas.sim.sweep import saturated, saturation, sweep_time_scales
from prfaas.workload.prefix_heavy import PrefixHeavySpec, prefix_heavy_trace, write_mooncake_trace
from prfaas.workload.trace import read_mooncake_trace

SCENARIO = "paper-case-study-mooncake"
POLICY_OF = {"prfaas_pd": "prfaas", "homogeneous_pd": "homogeneous"}
DEFAULT_FACTORS = "0.8,0.85,0.9,0.95,1,1.05,1.1,1.25"


def _pinned(body: ScenarioFile, point: PoolAwarePoint) -> ScenarioFile:
    assert body.simulation is not None
    pin = DeploymentFile(
        n_prfaas=point.n_prfaas,
        n_p=point.n_p,
        n_d=point.n_d,
        threshold_tokens=point.threshold_tokens,
    )
    sim = body.simulation.model_copy(update={"deployment": pin})
    return body.model_copy(update={"simulation": sim})


def measure(trace_path: Path, factors: list[float]) -> list[dict[str, Any]]:
    body, base = read_scenario_file(SCENARIO)
    body = with_trace(body, trace_path)
    scenario = build_scenario(body, base, SCENARIO)
    assert body.simulation is not None
    requests = read_mooncake_trace(trace_path)
    cache = CacheConfig.for_model(
        scenario.hardware.pd.profile.model,
        block_tokens=512,
        capacity_bytes=int(body.simulation.prefix_cache_gib * 2**30),
    )
    started = time.perf_counter()
    points = pool_aware_plan(requests, scenario.hardware, cache, scenario.threshold_step_tokens)
    plan_s = time.perf_counter() - started
    out = []
    for point in points:
        policy = POLICY_OF[point.deployment]
        scales = [point.time_scale / f for f in factors]
        started = time.perf_counter()
        rows = sweep_time_scales(_pinned(body, point), base, SCENARIO, scales, [policy])
        rate, at_scale = saturation(rows)[policy]
        out.append(
            {
                "deployment": point.deployment,
                "n_prfaas / n_p / n_d": f"{point.n_prfaas} / {point.n_p} / {point.n_d}",
                "threshold_tokens": point.threshold_tokens,
                "hit_ideal": point.ideal_hit_fraction,
                "hit_predicted": point.predicted_hit_fraction,
                "hit_simulated_at_saturation": next(
                    r.prefix_hit_fraction for r in rows if r.time_scale == at_scale
                ),
                "lambda_max_ideal": point.ideal_lambda_max,
                "lambda_max_predicted": point.lambda_max,
                "simulated_saturation_per_s": rate,
                "saturated": saturated(rows, policy),
                "ratio_predicted_to_simulated": point.lambda_max / rate,
                "sweep": [
                    {
                        "offered_per_s": r.offered_per_s,
                        "completed_per_s": r.throughput_per_s,
                        "hit": r.prefix_hit_fraction,
                    }
                    for r in rows
                ],
                "plan_s": plan_s,
                "simulate_s": time.perf_counter() - started,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, help="a Mooncake-format trace")
    parser.add_argument("--num-requests", type=int, default=0, help="N from --offset (0: all)")
    parser.add_argument("--offset", type=int, default=0, help="skip the first lines")
    parser.add_argument("--prefix-heavy", type=int, default=0, help="generate N requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load-factors", default=DEFAULT_FACTORS)
    args = parser.parse_args()
    factors = [float(x) for x in args.load_factors.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        if args.prefix_heavy:
            path = Path(tmp) / "prefix-heavy.jsonl"
            spec = PrefixHeavySpec(num_requests=args.prefix_heavy, seed=args.seed)
            write_mooncake_trace(prefix_heavy_trace(spec), path)
            name = f"prefix-heavy ({args.prefix_heavy}, seed {args.seed})"
        else:
            path = args.trace
            if args.num_requests or args.offset:
                path = Path(tmp) / "slice.jsonl"
                lines = args.trace.read_text().splitlines()[args.offset :]
                lines = lines[: args.num_requests or None]
                path.write_text("\n".join(lines) + "\n")
            name = f"{args.trace.name} ({args.num_requests or 'all'} from line {args.offset})"
        rows = measure(path, factors)
    print(json.dumps({"workload": name, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
