"""Router replicas and a WAN cut on the two-datacenter test bed (issue 29, acceptance).

The emulated deployment of tests/deploy (prfaas-1t: one PrfaaS prefill instance in the
PrfaaS datacenter, one PD prefill and one PD decode instance in the PD datacenter; link
1 Gbit/s, 10 ms RTT, tbf and the user-space delay line as `deploy.testbed` builds them),
rendered with `prfaas deploy render` and started pod by pod in network namespaces, in
three fresh beds, one after the other (in this order, or the reverse with --reverse: the
shared host's load drifts during a run, and the later beds take what it drifts to),
HAProxy in front each time:

    1_router            1 router
    3_router            3 router replicas, all behind HAProxy
    3_router_1_behind   the control: 3 replicas running (each polls every instance and
                        takes part in the lease), only the first behind HAProxy: the CPU
                        load of 3 replicas, the routing of one

In each bed, from the client host, with `prfaas bench` (its own process):

    trace        the first --num-requests lines of the Mooncake conversation trace
                 (../shared/traces; outputs capped at --max-output tokens, gaps x
                 --time-scale): prefix hit rate (cached / prompt tokens, as each answer
                 reports them) and P90 TTFT
    offered      fixed 1,024-token prompts, 16 tokens out, Poisson arrivals at
                 --offered-rate requests/s (open loop, below saturation; the same seed, so
                 the same arrivals in every bed): median and P90 TTFT. Below saturation a
                 request waits on little but its own work, so this compares routing, not
                 who wins the CPU
    saturation   fixed 1,024-token prompts, 16 tokens out, --concurrency in flight (closed
                 loop): requests per second; the highest load tried, not a proven ceiling.
                 On this 2-core host it measures mostly CPU contention (3 router
                 processes, HAProxy, 3 instances and the client share 2 cores)
    link cut     (1-router bed) a unique long prompt every 0.25 s (open loop); the WAN
                 cut: seconds until one is answered PD-P because the PrfaaS instance is
                 out of routing (detection); restored: seconds until one is answered
                 PrfaaS again (recovery); the longest request of each phase (one caught
                 on the cut waits out the router's call to the silent instance)
    lease        (3-router bed, after the others; the slow loop on, its default) the
                 replica holding the slow-loop lease (each replica's `/admin/state`) is
                 SIGKILLed: seconds until another replica reports holding it, at a higher
                 epoch (bounded by LEASE_BOUND_S); idle, no request in flight

Load averages are recorded (and printed) before and after each bed: the development host
is shared (2 cores; other engineers' tests run meanwhile), so the figures are a first take.
About 5 min:

    .venv/bin/python benchmarks/testbed_bench.py --save out/testbed_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from prfaas.deploy.bed_deployment import BedDeployment, deploy_on_bed
from prfaas.deploy.testbed import WanSpec, open_testbed, unavailable_reason
from prfaas.serve.config.deployment import ADMIN_TOKEN_ENV_VAR
from provenance import REPO_ROOT, emit, git_sha, host

TRACE = REPO_ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
WAN = WanSpec(rate_bits_per_s=1e9, one_way_delay_s=0.005)
START_TIMEOUT_S = 180.0
CUT_BOUND_S = 120.0
LEASE_BOUND_S = 60.0
PROBE_EVERY_S = 0.25
DEPLOYMENT = """\
model: prfaas-1t
block_tokens: 16
threshold_tokens: 2048
link: {rate_gbps: 1.0}
router: {port: 8000, poll_interval_s: 0.5}
emulation: {time_factor: 0.002, byte_factor: 0.001}
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
     capacity_mib: 16384}
  - {name: pdp-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 16384}
  - {name: pdd-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 16384}
"""


def _slice(args: argparse.Namespace, work: Path) -> Path:
    """The first lines of the trace, outputs capped (decode is not what is measured)."""
    lines = TRACE.read_text().splitlines()[: args.num_requests]
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["output_length"] = min(row["output_length"], args.max_output)
    path = work / "slice.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _bench(deployed: BedDeployment, url: str, work: Path, name: str, *extra: str) -> Any:
    """`prfaas bench` on the client host; its summary and records."""
    save, records = work / f"{name}.json", work / f"{name}.jsonl"
    argv = [sys.executable, "-m", "prfaas", "bench", "--endpoint", url + "/v1", "--json",
            "--save", str(save), "--records", str(records), *extra]  # fmt: skip
    process = deployed.bed.start(deployed.hosts["client"], argv, dict(os.environ))
    if process.wait() != 0:
        raise RuntimeError(f"prfaas bench ({name}) failed: see {work}/client.log")
    summary = json.loads(save.read_text())["metrics"]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    return summary, rows


def _trace_figures(summary: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in rows if r.get("error") is None]
    prompt = sum(r["input_tokens"] for r in done)
    return {
        "num_completed": summary["num_completed"],
        "num_failed": summary["num_failed"],
        "failures": summary["failures"],
        "num_rejected": summary["num_rejected"],
        "prefix_hit_rate": sum(r.get("cached_tokens", 0) for r in done) / max(prompt, 1),
        "p90_ttft_s": summary["ttft_s"]["p90"],
        "paths": summary["paths"],
    }


class _Prober:
    """Unique long prompts (over t: PrfaaS unless it is out of routing) sent every
    PROBE_EVERY_S from the client host, whatever the earlier ones are doing (open loop, so
    a request caught on the cut does not hold up the next)."""

    def __init__(self, deployed: BedDeployment, url: str) -> None:
        client = deployed.hosts["client"]
        self._pool = ThreadPoolExecutor(16, initializer=deployed.bed.enter, initargs=(client,))
        self._url = url
        self._n = 0

    def _ask(self, n: int) -> tuple[float, float, str]:
        sent_s = time.monotonic()
        body = {"model": "prfaas-1t", "prompt": f"{n} " + "x" * 4096, "max_tokens": 4}
        answer = httpx.post(self._url + "/v1/completions", json=body, timeout=120.0)
        served = answer.json().get("prfaas", {}) if answer.status_code == 200 else {}
        return sent_s, time.monotonic(), served.get("path", f"status {answer.status_code}")

    def until(self, path: str) -> dict[str, Any]:
        """From now until an answer on `path` arrives: its delay, and every answer's."""
        started_s = time.monotonic()
        futures: list[Future[tuple[float, float, str]]] = []
        while not any(f.done() and f.result()[2] == path for f in futures):
            if time.monotonic() - started_s > CUT_BOUND_S:
                raise RuntimeError(f"no {path} answer within {CUT_BOUND_S} s")
            self._n += 1
            futures.append(self._pool.submit(self._ask, self._n))
            time.sleep(PROBE_EVERY_S)
        answers = [f.result() for f in futures]  # the stragglers too
        first = min(done for _, done, p in answers if p == path)
        return {
            "first_answer_s": first - started_s,
            "num_requests": len(answers),
            "paths": sorted({p for _, _, p in answers}),
            "longest_e2e_s": max(done - sent for sent, done, _ in answers),
        }

    def close(self) -> None:
        self._pool.shutdown()


def _link_cut(deployed: BedDeployment, url: str) -> dict[str, Any]:
    """Detection: cut -> the first long prompt answered PD-P; recovery: restore -> the
    first answered PrfaaS again."""
    prober = _Prober(deployed, url)
    try:
        prober.until("prfaas")
        deployed.bed.cut_wan()
        detection = prober.until("pd-p")
        deployed.bed.restore_wan()
        recovery = prober.until("prfaas")
    finally:
        prober.close()
    return {"detection": detection, "recovery": recovery}


def _lease_handover(deployed: BedDeployment) -> dict[str, Any]:
    """SIGKILL the lease holder; until another replica reports holding the lease."""
    [token] = {p.env[ADMIN_TOKEN_ENV_VAR] for p in deployed.pods if p.container == "router"}
    headers = {"authorization": f"Bearer {token}"}

    def lease(router: str) -> dict[str, Any] | None:
        try:
            url = deployed.router_url(router) + "/admin/state"
            found: dict[str, Any] = httpx.get(url, headers=headers, timeout=2.0).json()["lease"]
        except httpx.HTTPError:
            return None
        return found

    client = deployed.hosts["client"]
    with ThreadPoolExecutor(1, initializer=deployed.bed.enter, initargs=(client,)) as pool:

        def holder(routers: list[str], above: int) -> tuple[str, int]:
            deadline = time.monotonic() + LEASE_BOUND_S
            while time.monotonic() < deadline:
                leases = [(r, pool.submit(lease, r).result()) for r in routers]
                held = [
                    (r, x["epoch"]) for r, x in leases if x and x["held"] and x["epoch"] > above
                ]
                if held:
                    return held[0]
                time.sleep(0.05)
            raise RuntimeError(f"no lease holder above epoch {above} within {LEASE_BOUND_S} s")

        old, old_epoch = holder(deployed.routers, 0)
        deployed.bed.kill(deployed.processes[old])
        killed_s = time.monotonic()
        new, new_epoch = holder([r for r in deployed.routers if r != old], old_epoch)
        handover_s = time.monotonic() - killed_s
    return {"handover_s": handover_s, "killed": old, "taker": new, "epochs": [old_epoch, new_epoch]}


BEDS = {"1_router": (1, 1), "3_router": (3, 3), "3_router_1_behind": (3, 1)}  # (running, behind)


def _offered(args: argparse.Namespace, deployed: BedDeployment, url: str, work: Path) -> Any:
    """Open-loop Poisson arrivals at --offered-rate (seeded: the same in every bed)."""
    summary, _ = _bench(deployed, url, work, "offered", "--workload", "fixed:in=1024,out=16",
                        "--num-requests", str(args.offered_requests),
                        "--rate", str(args.offered_rate), "--seed", "0")  # fmt: skip
    return {
        "offered_requests_per_s": args.offered_rate,
        "num_completed": summary["num_completed"],
        "num_failed": summary["num_failed"],
        "median_ttft_s": summary["ttft_s"]["median"],
        "p90_ttft_s": summary["ttft_s"]["p90"],
        "paths": summary["paths"],
    }


def _one_bed(args: argparse.Namespace, name: str, work: Path) -> dict[str, Any]:
    replicas, behind = BEDS[name]
    load_before = os.getloadavg()
    print(f"{name}: load average before {load_before}", file=sys.stderr, flush=True)
    with open_testbed(WAN, work) as bed:
        deployed = deploy_on_bed(bed, DEPLOYMENT, work, router_replicas=replicas)
        deployed.start()
        deployed.wait_ready(START_TIMEOUT_S)
        routers = deployed.routers[:behind]
        url = deployed.start_balancer(args.haproxy, work, START_TIMEOUT_S, routers)
        trace = _slice(args, work)
        result: dict[str, Any] = {"routers_running": replicas, "routers_behind_balancer": behind}
        summary, rows = _bench(deployed, url, work, "trace", "--trace", str(trace),
                               "--time-scale", str(args.time_scale))  # fmt: skip
        result["trace"] = _trace_figures(summary, rows)
        result["offered"] = _offered(args, deployed, url, work)
        summary, _ = _bench(deployed, url, work, "saturation", "--workload",
                            "fixed:in=1024,out=16", "--num-requests", str(args.saturation_requests),
                            "--max-concurrency", str(args.concurrency))  # fmt: skip
        result["saturation"] = {
            "requests_per_s": summary["request_throughput_per_s"],
            "num_failed": summary["num_failed"],
            "failures": summary["failures"],
            "highest_load_tried": f"{args.concurrency} in flight",
        }
        if name == "1_router":
            result["link_cut"] = _link_cut(deployed, url)
        elif name == "3_router":
            result["lease_handover"] = _lease_handover(deployed)
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print(f"{name}: load average after {result['load_average']['after']}", file=sys.stderr)
    left = bed.leftovers()
    if left:
        raise RuntimeError(f"the bed left {left}")
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-requests", type=int, default=48)
    parser.add_argument("--max-output", type=int, default=16)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--offered-rate", type=float, default=8.0, help="requests/s, open loop")
    parser.add_argument("--offered-requests", type=int, default=120)
    parser.add_argument("--saturation-requests", type=int, default=96)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--haproxy", default="/usr/sbin/haproxy")
    parser.add_argument(
        "--reverse", action="store_true", help="run the beds in reverse order (load drifts)"
    )
    parser.add_argument("--keep", help="keep each bed's files (logs, records) under here")
    parser.add_argument("--save")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    reason = unavailable_reason(WAN) or (None if TRACE.exists() else f"no trace at {TRACE}")
    if reason is None and not Path(args.haproxy).exists():
        reason = f"no HAProxy at {args.haproxy} (Debian package haproxy)"
    if reason is not None:
        emit({"benchmark": "testbed", "skipped": reason}, args.save)
        return
    beds = {}
    for name in reversed(BEDS) if args.reverse else BEDS:
        if args.keep is not None:  # every pod's log, the bench records, the rendered files
            work = Path(args.keep) / name
            work.mkdir(parents=True, exist_ok=True)
            beds[name] = _one_bed(args, name, work)
            continue
        with tempfile.TemporaryDirectory() as temporary:
            beds[name] = _one_bed(args, name, Path(temporary))
    one, three = beds["1_router"]["trace"], beds["3_router"]["trace"]
    emit(
        {
            "benchmark": "testbed",
            "git_sha": git_sha(),
            "host": host(),
            "shared_host": True,
            "config": {k: v for k, v in vars(args).items() if k not in ("save", "keep")},
            "beds": beds,
            "three_vs_one": {
                "p90_ttft_ratio": three["p90_ttft_s"] / one["p90_ttft_s"],
                "prefix_hit_rate_difference": three["prefix_hit_rate"] - one["prefix_hit_rate"],
                "p90_ttft_within_5_percent": bool(
                    np.isclose(three["p90_ttft_s"], one["p90_ttft_s"], rtol=0.05)
                ),
            },
            "offered_p90_ttft_ratio": {
                name: beds[name]["offered"]["p90_ttft_s"]
                / beds["1_router"]["offered"]["p90_ttft_s"]
                for name in BEDS
            },
            "lease_handover_s": beds["3_router"]["lease_handover"]["handover_s"],
        },
        args.save,
    )


if __name__ == "__main__":
    main()
