"""Burst acceptance (docs/simulation.md): simultaneous requests on the case-study deployment,
every policy, TTFT mean / P90 / P99 as JSON. The deployments are the planner's for the
case-study workload; only the burst's requests differ.

    .venv/bin/python benchmarks/sim_burst.py
"""

from __future__ import annotations

import json

from prfaas.kvcache.ids import RequestId
from prfaas.planner.scenario import build_scenario, read_scenario_file
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.config import build_run_config
from prfaas.sim.report import build_report
from prfaas.sim.runner import Simulator

SHAPES = {
    # 300 simultaneous 3K-token prompts (issue 15), 1,024-token outputs as in the case study.
    "300 x 3K": [SimRequest(RequestId(f"b{i}"), 0.0, 3072, 1024) for i in range(300)],
    # 400 at once: four in five 3K, one in five 40K (above t), 256-token outputs.
    "400 mixed 3K / 40K": [
        SimRequest(RequestId(f"m{i}"), 0.0, 40_000 if i % 5 == 0 else 3072, 256) for i in range(400)
    ],
}
POLICIES = ("prfaas", "homogeneous", "dynamo", "fixed", "naive")


def main() -> None:
    body, base = read_scenario_file("paper-case-study")
    scenario = build_scenario(body, base, "paper-case-study")
    slo = body.simulation.slo if body.simulation is not None else None
    rows = []
    for shape, requests in SHAPES.items():
        for policy in POLICIES:
            config = build_run_config(scenario, body, base, policy)
            report = build_report(config, Simulator(config, requests).run(), slo)
            ttft = report.summary.ttft_s
            rows.append(
                {
                    "shape": shape,
                    "policy": policy,
                    "ttft_mean_s": ttft.mean,
                    "ttft_p90_s": ttft.p90,
                    "ttft_p99_s": ttft.p99,
                    "reasons": report.reasons,
                }
            )
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
