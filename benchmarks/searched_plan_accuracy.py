"""The searched plan against its simulation (issue 30, docs/benchmarks.md "Planner accuracy"):
for cells of the aiconfigurator comparison (`aic_side_by_side.py`: 8 + 56 H200, ISL 8000 /
OSL 512, TPOT 33 ms, `--timing aic --engine sglang`), the plan `prfaas plan --timing aic
--search-parallelism` makes (`planner.parallel.ShapeSearch`) and the simulator's saturation
of that very plan (`prfaas simulate --timing aic --search-parallelism`: each role in its
searched shape and source). Prints JSON.

    .venv/bin/python benchmarks/searched_plan_accuracy.py [--models llama-3.1-70b,qwen3.5-397b]
        [--chip h200 --engine sglang --load-factors 0.9,1,1.1,1.25 --num-requests 4000]

Per cell and deployment (PrfaaS-PD, the policy `prfaas`, and homogeneous PD on the same
shapes, `homogeneous`): Poisson arrivals at `--load-factors` x the plan's Lambda_max,
`--num-requests` each, admission off, the slow loop off. The simulated saturation is the
largest steady completion rate over those loads (`metrics.steady_throughput`: from the 10%
warm-up to the last arrival, so the drain is left out; the whole-run rate beside it);
`saturated` says whether some load was completed >= 10% short of the offered rate, else the
figure is only the highest load tried. No TTFT objective: the plan's Lambda_max is then the
rate its bottleneck stage sustains fully busy (Eq. 3-6), what a saturation measures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from prfaas.metrics import steady_throughput
from prfaas.planner.parallel import ShapeSearch
from prfaas.planner.scenario import (
    ArrivalsFile,
    Scenario,
    ScenarioFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.sim.api import scenario_arrivals
from prfaas.sim.config import build_run_config, chosen_plan
from prfaas.sim.report import role_shapes
from prfaas.sim.runner import Simulator
from provenance import git_sha, host

POLICY_OF = {"prfaas_pd": "prfaas", "homogeneous_pd": "homogeneous"}
SHORTFALL = 0.1  # as sim.sweep.SATURATION_SHORTFALL


def _body(model: str, chip: str, engine: str) -> dict[str, Any]:
    return {
        "name": f"{model}-{chip}",
        "model": model,
        "prfaas": {"chip": chip, "num_gpus": 8, "gpus_per_instance": 8},
        "pd": {"chip": chip, "num_gpus": 56, "gpus_per_instance": 8},
        "link_gbps": 100,
        "decode": {"slo_tokens_per_s": 1e3 / 33},
        "workload": {"input": {"fixed_tokens": 8000}, "output": {"fixed_tokens": 512}},
        "threshold_step_tokens": 100,
        "timing": {"source": "aic", "engine": engine},
        "simulation": {"seed": 0, "admission": {"mode": "off"}},
    }


def _load(
    scenario: Scenario, body: ScenarioFile, base_dir: Path, *, policy: str, rate: float, n: int
) -> dict[str, Any]:
    """One Poisson load through the searched plan: offered, steady and whole-run rates."""
    run_body = body.model_copy(update={"arrivals": ArrivalsFile(rate_per_s=rate, num_requests=n)})
    requests = scenario_arrivals(run_body, base_dir)
    config = build_run_config(scenario, run_body, base_dir, policy)
    result = Simulator(config, requests).run()
    last_arrival_s = max(r.arrival_s for r in requests)
    steady = steady_throughput(result.records, last_arrival_s)
    done = [r for r in result.records if r.is_completed]
    end_s = max((r.last_token_s or 0.0) for r in done)
    return {
        "offered_per_s": len(requests) / last_arrival_s,
        "steady_per_s": None if steady is None else steady.request_throughput_per_s,
        "whole_run_per_s": len(done) / end_s,
        "num_completed": len(done),
        "shapes": role_shapes(config),
        "notes": list(config.notes),
    }


def measure(
    model: str, chip: str, engine: str, factors: list[float], n: int
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.yaml"
        path.write_text(yaml.safe_dump(_body(model, chip, engine)))
        body, base_dir = read_scenario_file(str(path))
        started = time.perf_counter()
        scenario = ShapeSearch().apply(build_scenario(body, base_dir, path.name))
        report = chosen_plan(scenario, body, base_dir).report
        plan_s = time.perf_counter() - started
        rows = []
        for deployment, policy in POLICY_OF.items():
            planned = report.deployments[deployment].lambda_max
            started = time.perf_counter()
            loads = [
                _load(scenario, body, base_dir, policy=policy, rate=f * planned, n=n)
                for f in factors
            ]
            steady = [x["steady_per_s"] or 0.0 for x in loads]
            best = max(range(len(loads)), key=steady.__getitem__)
            point = report.deployments[deployment]
            rows.append({
                "model": model, "chip": chip, "engine": engine, "deployment": deployment,
                "n_prfaas / n_p / n_d": f"{point.n_prfaas} / {point.n_p} / {point.n_d}",
                "threshold_tokens": point.threshold_tokens, "bottleneck": str(point.bottleneck),
                "shapes": loads[0]["shapes"], "notes": loads[0]["notes"],
                "lambda_max": planned, "simulated_saturation_per_s": steady[best],
                "at_offered_per_s": loads[best]["offered_per_s"],
                "saturated": any(
                    x["whole_run_per_s"] < (1 - SHORTFALL) * x["offered_per_s"]
                    or (x["steady_per_s"] or 0.0) < (1 - SHORTFALL) * x["offered_per_s"]
                    for x in loads
                ),
                "ratio_planned_to_simulated": planned / steady[best] if steady[best] else None,
                "loads": [{k: v for k, v in x.items() if k not in {"shapes", "notes"}}
                          for x in loads],
                "plan_s": plan_s, "simulate_s": time.perf_counter() - started,
            })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama-3.1-70b,qwen3.5-397b,qwen3-235b")
    parser.add_argument("--chip", default="h200")
    parser.add_argument("--engine", default="sglang")
    parser.add_argument("--load-factors", default="0.9,1,1.1,1.25")
    parser.add_argument("--num-requests", type=int, default=4000)
    args = parser.parse_args()
    factors = [float(x) for x in args.load_factors.split(",")]
    started = time.perf_counter()
    rows = [
        row
        for model in args.models.split(",")
        for row in measure(model, args.chip, args.engine, factors, args.num_requests)
    ]
    out = {
        "benchmark": "searched_plan_accuracy",
        "config": vars(args),
        "rows": rows,
        "wall_s": time.perf_counter() - started,
        "load_average": os.getloadavg(),
        "git_sha": git_sha(),
        "host": host(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
