"""Simulator versus the live emulated deployment on the same arrivals (issue 9, item 4).

For each workload (a slice of the Mooncake conversation trace; the paper's lognormal) this
writes one Mooncake-format arrivals file in modelled time (lengths capped to the deployment's
context, outputs capped to keep the run short), then for each layout of the scaled case study:

    prfaas simulate -s <scenario.yaml> --trace arrivals.jsonl --policy P --json
        (the same instance counts, chips and t; the link at its unscaled 100 Gbps, because the
         simulator runs in modelled time on real bytes: 0.1953 Gbps x time_factor / byte_factor)
    prfaas up configs/case-study-<layout>.yaml   (in this process, as `prfaas up` runs it:
                                                 `serve.launch.launcher.Launcher`, router on a
                                                 free port)
    prfaas bench --trace arrivals.jsonl --time-scale <time_factor> --json
        (every modelled second lasts time_factor seconds live)

and compares live with the simulation mapped to wall time (TTFT x time_factor, throughput /
time_factor); both report `prfaas.metrics`' duration (first arrival -> last token), so their
throughputs are per the same second. Prints JSON (numbers, relative differences, resolved
config, git SHA, host) and writes it to --save. Usage:

    .venv/bin/python benchmarks/sim_vs_live.py --save /tmp/sim_vs_live.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from prfaas.cli.output import progress_bar
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.launch.launcher import Launcher
from provenance import emit, git_sha, host

ROOT = Path(__file__).resolve().parents[1]
PRFAAS = str(ROOT / ".venv" / "bin" / "prfaas")
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
BLOCK_TOKENS = 512
MAX_CONTEXT_TOKENS = 135_168  # emulation.max_context_tokens of the case-study files
TIME_FACTOR = 2.0  # emulation.time_factor of the case-study files

# layout: (deployment file, simulator policy, n_prfaas, n_p, n_d, t)
LAYOUTS: dict[str, tuple[str, str, int, int, int, int]] = {
    "prfaas-pd": ("configs/case-study-prfaas-pd.yaml", "prfaas", 4, 3, 5, 19_600),
    "homogeneous": ("configs/case-study-homogeneous.yaml", "homogeneous", 0, 9, 3, 19_600),
    "naive": ("configs/case-study-naive.yaml", "naive", 4, 0, 8, 1),  # sim needs t >= 1
}


def trace_arrivals(n: int, offset: int, max_output: int, time_scale: float) -> list[dict[str, Any]]:
    """Lines [offset, offset + n) of the conversation trace, rebased to t = 0, capped."""
    lines = TRACE.read_text().splitlines()[offset : offset + n]
    rows = [json.loads(line) for line in lines]
    t0 = rows[0]["timestamp"]
    out = []
    for row in rows:
        output = min(max(1, row["output_length"]), max_output)
        inp = min(row["input_length"], MAX_CONTEXT_TOKENS - output - 1)
        out.append(
            {
                "timestamp": round((row["timestamp"] - t0) * time_scale),
                "input_length": inp,
                "output_length": output,
                "hash_ids": row["hash_ids"][: math.ceil(inp / BLOCK_TOKENS)],
            }
        )
    return out


def lognormal_arrivals(n: int, rate_per_s: float, output: int, seed: int) -> list[dict[str, Any]]:
    """The paper's inputs (lognormal mu 9.9, sigma 1 on [128, context]), Poisson arrivals,
    unique hash ids (no prefix is shared)."""
    rng = random.Random(seed)
    t_s, rows, next_hash = 0.0, [], 10**9
    for _ in range(n):
        inp = int(min(max(rng.lognormvariate(9.9, 1.0), 128), MAX_CONTEXT_TOKENS - output - 1))
        blocks = math.ceil(inp / BLOCK_TOKENS)
        rows.append(
            {
                "timestamp": round(t_s * 1000),
                "input_length": inp,
                "output_length": output,
                "hash_ids": list(range(next_hash, next_hash + blocks)),
            }
        )
        next_hash += blocks
        t_s += rng.expovariate(rate_per_s)
    return rows


def scenario_yaml(layout: str) -> str:
    _, policy, n_prfaas, n_p, n_d, t = LAYOUTS[layout]
    return (
        f"name: sim-vs-live-{layout}\n"
        "model: prfaas-1t\n"
        f"prfaas: {{chip: h200, num_gpus: {8 * max(n_prfaas, 1)}, gpus_per_instance: 8}}\n"
        f"pd: {{chip: h20, num_gpus: {8 * (n_p + n_d)}, gpus_per_instance: 8}}\n"
        "link_gbps: 100\n"
        "link: {rtt_s: 0.01}\n"  # live rtt 20 ms / time_factor
        "decode: {slo_tokens_per_s: 40}\n"
        "workload:\n"
        "  input: {lognormal: {mu: 9.9, sigma: 1.0, min_tokens: 128, max_tokens: 128K}}\n"
        "  output: {fixed_tokens: 128}\n"
        "arrivals: {process: poisson, rate_per_s: 1, num_requests: 10}\n"
        "simulation:\n"
        f"  policy: {policy}\n"
        f"  deployment: {{n_prfaas: {n_prfaas}, n_p: {n_p}, n_d: {n_d}, threshold_tokens: {t}}}\n"
        "  prefix_cache_gib: 100\n"  # the emulated instances' capacity_mib 102400
        "  decode_kv_gib: 100\n"
    )


def simulate(work: Path, layout: str, arrivals: Path) -> dict[str, Any]:
    scenario = work / f"scenario-{layout}.yaml"
    scenario.write_text(scenario_yaml(layout))
    policy = LAYOUTS[layout][1]
    cmd = [PRFAAS, "simulate", "-s", str(scenario), "--trace", str(arrivals)]
    out = subprocess.run([*cmd, "--policy", policy, "--json"], capture_output=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)[0]
    return result


def live(work: Path, layout: str, arrivals: Path, n: int) -> dict[str, Any]:
    """The layout's deployment up (router on a free port), `prfaas bench` on the arrivals."""
    deployment = load_deployment(ROOT / LAYOUTS[layout][0])
    router = deployment.router.model_copy(update={"port": 0})
    deployment = deployment.model_copy(update={"router": router})
    env = {**os.environ, "PRFAAS_TRANSFER_SECRET": "sim-vs-live-secret-0123456789"}
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", env["PRFAAS_TRANSFER_SECRET"])
    save = work / f"live-{layout}-{arrivals.stem}.json"
    with Launcher(deployment) as launcher:
        launcher.wait_healthy(300)
        bench = [PRFAAS, "bench", "--endpoint", launcher.url, "--trace", str(arrivals)]
        bench += ["--time-scale", str(TIME_FACTOR), "--num-requests", str(n)]
        bench += ["--model", "prfaas-1t", "--json", "--save", str(save)]
        bench += ["--records", str(save.with_suffix(".records.jsonl"))]
        subprocess.run(bench, capture_output=True, check=False, env=env)
    result: dict[str, Any] = json.loads(save.read_text())
    return result


def _view(metrics: dict[str, Any], scale_s: float) -> dict[str, Any]:
    """Throughput (req/s) and TTFT P50/P90 (s) in wall time (`scale_s` x modelled seconds)."""
    ttft = metrics["ttft_s"]
    return {
        "completed": metrics["num_completed"],
        "failed": metrics["num_failed"],
        "throughput_per_s": metrics["request_throughput_per_s"] / scale_s,
        "ttft_p50_s": None if ttft["median"] is None else ttft["median"] * scale_s,
        "ttft_p90_s": None if ttft["p90"] is None else ttft["p90"] * scale_s,
        "paths": metrics["paths"],
    }


def _rel(live_v: float | None, sim_v: float | None) -> float | None:
    if live_v is None or sim_v is None or sim_v == 0:
        return None
    return round((live_v - sim_v) / sim_v, 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="prfaas-pd,homogeneous,naive")
    ap.add_argument("--workloads", default="trace,lognormal")
    ap.add_argument("--num-requests", type=int, default=80)
    ap.add_argument("--trace-offset", type=int, default=2000)
    ap.add_argument("--trace-time-scale", type=float, default=1.0, help="modelled gaps x this")
    ap.add_argument("--lognormal-rate", type=float, default=1.8, help="modelled req/s")
    ap.add_argument("--max-output-tokens", type=int, default=128)
    ap.add_argument("--work-dir", default="/tmp/prfaas-sim-vs-live")
    ap.add_argument("--save", default=None)
    args = ap.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    n = args.num_requests
    makers = {
        "trace": lambda: trace_arrivals(
            n, args.trace_offset, args.max_output_tokens, args.trace_time_scale
        ),
        "lognormal": lambda: lognormal_arrivals(n, args.lognormal_rate, args.max_output_tokens, 0),
    }
    rows = []
    workloads, layouts = args.workloads.split(","), args.layouts.split(",")
    with progress_bar(counted=True) as bar:
        task = bar.add_task("runs", total=len(workloads) * len(layouts))
        for workload in workloads:
            arrivals = work / f"{workload}.jsonl"
            arrivals.write_text("".join(json.dumps(r) + "\n" for r in makers[workload]()))
            for layout in layouts:
                bar.update(task, description=f"{workload} on {layout}")
                rows.append(_compare(work, workload, layout, arrivals, n))
                bar.advance(task)
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    _report(args, rows)


def _compare(work: Path, workload: str, layout: str, arrivals: Path, n: int) -> dict[str, Any]:
    """One layout on one workload: the simulator's and the live run's figures, and their gap."""
    sim = _view(simulate(work, layout, arrivals)["metrics"], TIME_FACTOR)
    got = _view(live(work, layout, arrivals, n)["metrics"], 1.0)
    rel = {k: _rel(got[k], sim[k]) for k in ("throughput_per_s", "ttft_p50_s", "ttft_p90_s")}
    return {"workload": workload, "layout": layout, "sim": sim, "live": got, "rel": rel}


def _report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    result = {
        "benchmark": "sim_vs_live",
        "loadavg": os.getloadavg(),
        "config": {**vars(args), "time_factor": TIME_FACTOR, "max_context": MAX_CONTEXT_TOKENS},
        "git_sha": git_sha(),
        "host": host(),
        "rows": rows,
    }
    emit(result, args.save)


if __name__ == "__main__":
    main()
