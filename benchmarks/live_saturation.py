"""The live scaled case study at and above saturation (issue 9, acceptance 1).

For each layout of the scaled case study (configs/case-study-{prfaas-pd,homogeneous,naive}.yaml:
12 emulated instances, time_factor 2, byte_factor 1/256; started in this process as `prfaas up`
starts it, the router on a free port) two `prfaas bench` runs of the paper's workload (input
lognormal mu 9.9, sigma 1 on [128, 128K], Poisson arrivals, the same arrivals for every layout):

    ttft        --rate = ttft-load x min(planner Lambda_max) / time_factor: every layout below
                saturation; every request completes; P50 / P90 TTFT
    saturation  --rate = overload x max(planner Lambda_max) / time_factor: every layout above
                saturation; `--duration` ends the run at the last arrival (requests still in
                flight are cut off, no drain); steady throughput = completions per second from
                the end of the warm-up (10% of the requests completed) to the last arrival
                (`prfaas.metrics.steady_throughput`)

Outputs are capped at 128 tokens (the planner's 1,024 would only lengthen the run: decode is no
layout's bottleneck, every planner theta_pd_d exceeds its Lambda_max, and a shorter output only
widens that margin), so the planner's Lambda_max is the prefill bound throughout. The planner's
numbers come from `prfaas plan --json` (paper-case-study); the simulator runs the very same
arrivals (benchmarks/sim_vs_live.py's scenarios) for a second prediction. The host check: CPU
seconds of the router, the instances and the bench client per run (an overloaded client or
router would cap every layout at the same throughput), and load averages. Prints JSON and
writes --save. About 10 minutes:

    .venv/bin/python benchmarks/live_saturation.py --save /tmp/live_saturation.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from prfaas.bench import parse_workload_spec, synthetic_arrivals
from prfaas.cli.output import progress_bar
from prfaas.metrics import RequestRecord, steady_throughput
from prfaas.planner.scenario import ScenarioFile, build_scenario, validate
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher
from prfaas.sim.arrivals import trace_arrivals
from prfaas.sim.config import build_run_config
from prfaas.sim.runner import Simulator
from prfaas.workload.trace import read_mooncake_trace
from provenance import emit, git_sha, host
from sim_vs_live import LAYOUTS, PRFAAS, ROOT, scenario_yaml

PLANNER_KEYS = {
    "prfaas-pd": "prfaas_pd",
    "homogeneous": "homogeneous_pd",
    "naive": "naive_heterogeneous",
}
MODEL = "prfaas-1t"
OUTPUT_TOKENS = 128
WARMUP_FRACTION = 0.1


def workload_spec(output_tokens: int) -> str:
    return f"lognormal:mu=9.9,sigma=1,min=128,max=131072,out={output_tokens}"


def planner() -> dict[str, Any]:
    out = subprocess.run(
        [PRFAAS, "plan", "--scenario", "paper-case-study", "--json"],
        capture_output=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return {layout: report[key] for layout, key in PLANNER_KEYS.items()}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def read_records(path: Path) -> list[RequestRecord]:
    """`prfaas bench --records` lines as records (gaps are not kept: one token span)."""
    records = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        first, last = row["first_token_s"], row["last_token_s"]
        times = [] if first is None else [first, last] if last != first else [first]
        records.append(
            RequestRecord.from_token_times(
                row["request_id"], row["arrival_s"], row["input_tokens"], times, error=row["error"]
            )
        )
    return records


def bench(
    url: str,
    work: Path,
    tag: str,
    *,
    rate: float,
    num: int,
    seed: int,
    duration_s: float | None,
    pids: dict[str, int],
) -> dict[str, Any]:
    """One `prfaas bench` run; its metrics, records file and the CPU each process used."""
    save, records = work / f"{tag}.json", work / f"{tag}.records.jsonl"
    cmd = [PRFAAS, "bench", "--endpoint", url, "--workload", workload_spec(OUTPUT_TOKENS)]
    cmd += ["--rate", f"{rate:.6f}", "--num-requests", str(num), "--seed", str(seed)]
    cmd += ["--model", MODEL, "--json", "--save", str(save), "--records", str(records)]
    if duration_s is not None:
        cmd += ["--duration", f"{duration_s:.3f}"]
    before = {name: _cpu_s(pid) for name, pid in pids.items()}
    client_before, load_before, t0 = _children_cpu_s(), os.getloadavg(), time.monotonic()
    subprocess.run(cmd, capture_output=True, check=False)
    wall_s = time.monotonic() - t0
    used = {name: _cpu_s(pid) - before[name] for name, pid in pids.items()}
    cpu = {
        "wall_s": round(wall_s, 1),
        "router_core_fraction": round(used.pop("router") / wall_s, 3),
        "instances_core_fraction": round(sum(used.values()) / wall_s, 3),
        "bench_core_fraction": round((_children_cpu_s() - client_before) / wall_s, 3),
        "loadavg_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    report: dict[str, Any] = json.loads(save.read_text())
    return {"report": report, "records": records, "cpu": cpu}


def ttft_view(metrics: dict[str, Any]) -> dict[str, Any]:
    ttft = metrics["ttft_s"]
    return {
        "completed": metrics["num_completed"],
        "failed": metrics["num_failed"],
        "ttft_mean_s": ttft["mean"],
        "ttft_p50_s": ttft["median"],
        "ttft_p90_s": ttft["p90"],
        "paths": metrics["paths"],
    }


def saturation_view(records: list[RequestRecord], metrics: dict[str, Any]) -> dict[str, Any]:
    end_s = max(r.arrival_s for r in records)
    steady = steady_throughput(records, end_s, WARMUP_FRACTION)
    return {
        "offered": len(records),
        "completed": metrics["num_completed"],
        "failures": metrics["failures"],
        "steady_throughput_per_s": None if steady is None else steady.request_throughput_per_s,
        "window_s": None if steady is None else [round(steady.start_s, 2), round(end_s, 2)],
        "completed_in_window": None if steady is None else steady.num_completed,
        "ttft_p90_s_at_overload": metrics["ttft_s"]["p90"],
        "paths": metrics["paths"],
    }


def write_arrivals(path: Path, rate: float, num: int, seed: int, time_factor: float) -> None:
    """The bench's synthetic arrivals (same spec, rate, seed) as a Mooncake file in modelled
    time, each request with unique hash ids (no prefix is shared), for the simulator."""
    spec = parse_workload_spec(workload_spec(OUTPUT_TOKENS))
    lines, next_hash = [], 10**9
    for a in synthetic_arrivals(spec, num, rate, 1.0, seed):
        blocks = -(-a.input_tokens // 512)
        row = {
            "timestamp": round(a.at_s / time_factor * 1000, 3),
            "input_length": a.input_tokens,
            "output_length": a.output_tokens,
            "hash_ids": list(range(next_hash, next_hash + blocks)),
        }
        next_hash += blocks
        lines.append(json.dumps(row) + "\n")
    path.write_text("".join(lines))


def simulate(work: Path, layout: str, arrivals: Path, time_factor: float) -> dict[str, Any]:
    """The simulator on the same arrivals, its numbers in wall time (x time_factor)."""
    body = validate(ScenarioFile, yaml.safe_load(scenario_yaml(layout)), f"sim-{layout}")
    scenario = build_scenario(body, work, f"sim-{layout}")
    config = build_run_config(scenario, body, work, LAYOUTS[layout][1])
    requests = trace_arrivals(read_mooncake_trace(arrivals), 1.0)
    records = Simulator(config, requests).run().records
    steady = steady_throughput(records, max(r.arrival_s for r in records), WARMUP_FRACTION)
    return {
        "steady_throughput_per_s": None
        if steady is None
        else steady.request_throughput_per_s / time_factor,
    }


def run_layout(
    work: Path, layout: str, rates: dict[str, float], args: argparse.Namespace
) -> dict[str, Any]:
    deployment = load_deployment(ROOT / LAYOUTS[layout][0])
    router = deployment.router.model_copy(update={"port": 0})
    deployment = deployment.model_copy(update={"router": router})
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "live-saturation-secret-0123456789")
    with Launcher(deployment) as launcher:
        launcher.wait_healthy(300)
        pids = {name: child.pid for name, child in launcher.children.items()}
        ttft = bench(
            launcher.url,
            work,
            f"{layout}-ttft",
            rate=rates["ttft"],
            num=args.ttft_requests,
            seed=args.seed - 1,
            duration_s=None,
            pids=pids,
        )
        arrivals = synthetic_arrivals(
            parse_workload_spec(workload_spec(OUTPUT_TOKENS)),
            args.saturation_requests,
            rates["saturation"],
            1.0,
            args.seed,
        )
        last_s = max(a.at_s for a in arrivals)
        sat = bench(
            launcher.url,
            work,
            f"{layout}-saturation",
            rate=rates["saturation"],
            num=args.saturation_requests,
            seed=args.seed,
            duration_s=last_s + 0.5,
            pids=pids,
        )
        shaping = deployment.link.shaping.value
    return {
        "layout": layout,
        "link_shaping": shaping,
        "ttft": ttft_view(ttft["report"]["metrics"]) | {"cpu": ttft["cpu"]},
        "saturation": saturation_view(read_records(sat["records"]), sat["report"]["metrics"])
        | {"cpu": sat["cpu"]},
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 3)


def _layout_row(  # noqa: PLR0917 (main's locals, passed on)
    work: Path,
    layout: str,
    rates: dict[str, float],
    args: argparse.Namespace,
    plan: dict[str, Any],
    time_factor: float,
    sim_arrivals: Path,
) -> dict[str, Any]:
    row = run_layout(work, layout, rates, args)
    row["planner"] = {
        "lambda_max_per_s": plan[layout]["lambda_max"] / time_factor,
        "ttft_p90_s": plan[layout]["ttft_p90_s"] * time_factor,
        "ttft_mean_s": plan[layout]["ttft_mean_s"] * time_factor,
    }
    row["simulator_saturation"] = simulate(work, layout, sim_arrivals, time_factor)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="prfaas-pd,homogeneous,naive")
    ap.add_argument("--overload", type=float, default=1.3, help="x max Lambda_max")
    ap.add_argument("--ttft-load", type=float, default=0.8, help="x min Lambda_max")
    ap.add_argument("--saturation-requests", type=int, default=200)
    ap.add_argument("--ttft-requests", type=int, default=60)
    ap.add_argument("--seed", type=int, default=2, help="saturation arrivals (TTFT: seed - 1)")
    ap.add_argument("--work-dir", default="/tmp/prfaas-live-saturation")
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    layouts = args.layouts.split(",")
    plan = planner()
    time_factor = load_deployment(ROOT / LAYOUTS["prfaas-pd"][0]).emulation.time_factor
    lambdas = [plan[k]["lambda_max"] for k in PLANNER_KEYS]
    rates = {
        "ttft": args.ttft_load * min(lambdas) / time_factor,
        "saturation": args.overload * max(lambdas) / time_factor,
    }
    sim_arrivals = work / "saturation-arrivals.jsonl"
    write_arrivals(
        sim_arrivals, rates["saturation"], args.saturation_requests, args.seed, time_factor
    )
    rows = {}
    with progress_bar(counted=True) as bar:
        task = bar.add_task("layouts", total=len(layouts))
        for layout in layouts:
            bar.update(task, description=f"layout {layout}")
            rows[layout] = _layout_row(work, layout, rates, args, plan, time_factor, sim_arrivals)
            bar.advance(task)
            print(json.dumps(rows[layout]), file=sys.stderr, flush=True)
    comparison = {}
    base = "prfaas-pd"
    for other in (k for k in layouts if k != base and base in rows):
        live_thr = [rows[k]["saturation"]["steady_throughput_per_s"] for k in (base, other)]
        sim_thr = [
            rows[k]["simulator_saturation"]["steady_throughput_per_s"] for k in (base, other)
        ]
        live_p90 = [rows[k]["ttft"]["ttft_p90_s"] for k in (base, other)]
        comparison[f"prfaas-pd vs {other}"] = {
            "throughput_ratio": {
                "planner": _ratio(plan[base]["lambda_max"], plan[other]["lambda_max"]),
                "simulator": _ratio(*sim_thr),
                "live": _ratio(*live_thr),
            },
            f"ttft_p90_ratio_{other}_over_prfaas_pd": {
                "planner": _ratio(plan[other]["ttft_p90_s"], plan[base]["ttft_p90_s"]),
                "live": _ratio(live_p90[1], live_p90[0]),
            },
        }
    result = {
        "benchmark": "live_saturation",
        "config": {**vars(args), "time_factor": time_factor, "output_tokens": OUTPUT_TOKENS}
        | {"rates_per_s": rates, "workload": workload_spec(OUTPUT_TOKENS)},
        "git_sha": git_sha(),
        "host": host(),
        "layouts": rows,
        "comparison": comparison,
    }
    emit(result, args.save)


if __name__ == "__main__":
    main()
