"""Simulator speed: the conversation trace on the case-study deployment, a large synthetic run,
and the same tandem queueing network in our event core and in SimPy (the yardstick).

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/sim_bench.py [--synthetic N] [--tandem N]

Prints JSON (rates, resolved config, git SHA, host). Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from prfaas.planner.scenario import ArrivalsFile, SimulationFile, read_scenario_file
from prfaas.sim.api import simulate_body, with_trace
from prfaas.sim.queueing import run_tandem
from provenance import git_sha, host

TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
)


def bench_trace() -> dict[str, object]:
    body, base = read_scenario_file("paper-case-study")
    body = with_trace(body, TRACE)
    body = body.model_copy(update={"simulation": SimulationFile(prefix_cache_gib=512)})
    start, cpu = time.perf_counter(), time.process_time()
    run = simulate_body(body, base, "trace", ["prfaas"])[0]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    n = run.report.summary.num_requests
    return {
        "requests": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "requests_per_s": n / wall,
        "events_per_s": run.report.num_events / wall,
    }


def bench_synthetic(num: int) -> dict[str, object]:
    body, base = read_scenario_file("paper-case-study")
    arrivals = ArrivalsFile(process="poisson", rate_per_s=2.5, num_requests=num)
    body = body.model_copy(
        update={"arrivals": arrivals, "simulation": SimulationFile(sample_period_s=600)}
    )
    start, cpu = time.perf_counter(), time.process_time()
    run = simulate_body(body, base, "synthetic", ["prfaas"])[0]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "requests": num,
        "wall_s": wall,
        "cpu_s": cpu,
        "requests_per_s": num / wall,
        "events_per_s": run.report.num_events / wall,
    }


def _tandem_inputs(num: int) -> tuple[list[float], list[list[float]], list[int]]:
    rng = np.random.default_rng(0)
    gaps = rng.exponential(1 / 2.5, num).tolist()
    service = np.column_stack(
        [rng.exponential(2.4, num), rng.exponential(0.05, num), rng.exponential(25.0, num)]
    ).tolist()
    return gaps, service, [7, 1, 100]


def _simpy_tandem(gaps: list[float], service: list[list[float]], servers: list[int]) -> float:
    import simpy

    env = simpy.Environment()
    stations = [simpy.Resource(env, capacity=c) for c in servers]
    waits: list[float] = []

    def job(svc: list[float]):  # type: ignore[no-untyped-def]
        wait = 0.0
        for station, s in zip(stations, svc, strict=True):
            t0 = env.now
            with station.request() as req:
                yield req
                wait += env.now - t0
                yield env.timeout(s)
        waits.append(wait)

    def source():  # type: ignore[no-untyped-def]
        for gap, svc in zip(gaps, service, strict=True):
            yield env.timeout(gap)
            env.process(job(svc))

    env.process(source())
    env.run()
    return float(np.mean(waits))


def bench_tandem(num: int) -> dict[str, object]:
    gaps, service, servers = _tandem_inputs(num)
    start = time.perf_counter()
    ours = run_tandem(gaps, service, servers)
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    simpy_wait = _simpy_tandem(gaps, service, servers)
    simpy_s = time.perf_counter() - start
    return {
        "jobs": num,
        "prfaas_wall_s": ours_s,
        "simpy_wall_s": simpy_s,
        "prfaas_jobs_per_s": num / ours_s,
        "simpy_jobs_per_s": num / simpy_s,
        "speedup": simpy_s / ours_s,
        "prfaas_mean_wait_s": ours.mean_wait_s,
        "simpy_mean_wait_s": simpy_wait,
        "prfaas_events_per_s": ours.num_events / ours_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--synthetic", type=int, default=1_000_000)
    parser.add_argument("--tandem", type=int, default=200_000)
    args = parser.parse_args()
    result = {
        "git_sha": git_sha(),
        "host": host(),
        "load_avg_start": os.getloadavg(),  # a shared host: compare cpu_s, not only wall_s
        "tandem": bench_tandem(args.tandem),
        "trace": bench_trace(),
        "synthetic": bench_synthetic(args.synthetic),
    }
    result["load_avg_end"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
