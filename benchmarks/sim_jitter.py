"""How noisy the SLO-capacity sweep's comparison is (docs/simulation.md, SLO capacity): every
policy at each load factor x the reference capacity's time scale, repeated at jittered time
scales (x 0.99, 0.995, 1, 1.005, 1.01 by default), with the mean, spread and per-jitter
ranking of requests in SLO. A 3e-5 change of the time scale moved PrfaaS-PD by 2.6% on the
conversation slice, so a single run cannot separate policies that differ by 0-3%.

    .venv/bin/python benchmarks/sim_jitter.py --trace SLICE --reference-scale 0.4390631
    .venv/bin/python benchmarks/sim_jitter.py --trace PREFIX_HEAVY   # searches the reference

`--reference-scale` is the time scale of the first policy's SLO capacity (the sweep's
`capacity[0].time_scale`); without it the capacity search runs first (tolerance 5%, as in
docs/simulation.md). Runs one simulation at a time. Prints JSON. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from prfaas.planner.scenario import RebalanceFile, SimulationFile, read_scenario_file
from prfaas.sim.api import with_trace
from prfaas.sim.capacity import run_at, slo_capacity
from provenance import git_sha, host

SCENARIO = "paper-case-study-mooncake"
POLICIES = "prfaas,dynamo,homogeneous,fixed,naive"


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--loads", type=_floats, default=[1.25, 1.5, 2.0])
    parser.add_argument("--jitters", type=_floats, default=[0.99, 0.995, 1.0, 1.005, 1.01])
    parser.add_argument("--reference-scale", type=float, default=None)
    parser.add_argument("--admission", default="shed", choices=["off", "shed", "defer"])
    parser.add_argument("--rebalance-period", type=float, default=None, help="slow loop on (s)")
    args = parser.parse_args()

    body, base = read_scenario_file(SCENARIO)
    body = with_trace(body, args.trace)
    sim = body.simulation or SimulationFile()
    update: dict[str, Any] = {
        "admission": sim.admission.model_copy(update={"mode": args.admission})
    }
    if args.rebalance_period is not None:
        update["rebalance"] = RebalanceFile(period_s=args.rebalance_period)
    body = body.model_copy(update={"simulation": sim.model_copy(update=update)})
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]

    reference = args.reference_scale
    if reference is None:
        found = slo_capacity(body, base, SCENARIO, policies[0], rel_tol=0.05)
        if found.time_scale is None:
            raise SystemExit(f"{policies[0]} met the SLO target at no probed load")
        reference = found.time_scale

    loads = []
    num_requests = 0
    for load in args.loads:
        runs: dict[str, list[int]] = {p: [] for p in policies}
        firsts: dict[str, int] = {p: 0 for p in policies}
        for jitter in args.jitters:
            points = run_at(body, base, SCENARIO, reference / load * jitter, policies)
            for point in points:
                runs[point.policy].append(point.num_in_slo)
                num_requests = point.num_requests
            top = max(p.num_in_slo for p in points)
            for point in points:
                firsts[point.policy] += point.num_in_slo == top
        loads.append(
            {
                "load_factor": load,
                "policies": {
                    p: {
                        "in_slo": runs[p],
                        "mean": statistics.fmean(runs[p]),
                        "stdev": statistics.stdev(runs[p]) if len(runs[p]) > 1 else 0.0,
                        "min": min(runs[p]),
                        "max": max(runs[p]),
                        "first_at": firsts[p],
                    }
                    for p in policies
                },
            }
        )
    print(
        json.dumps(
            {
                "benchmark": "sim_jitter",
                "trace": str(args.trace),
                "num_requests_per_run": num_requests,
                "reference_time_scale": reference,
                "jitters": args.jitters,
                "admission": args.admission,
                "rebalance_period_s": args.rebalance_period,
                "loads": loads,
                "git": git_sha(),
                "host": host(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
