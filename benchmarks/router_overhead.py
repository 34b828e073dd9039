"""What a router adds over calling the backend directly: prfaas's router beside vllm-router and
sglang-router, in one run (issue 25, point 6), and prfaas's calls to its instances before a
request's first token (point 4's "before" figure).

    .venv/bin/python benchmarks/router_overhead.py [--save out/router_overhead.json]
    .venv/bin/python benchmarks/router_overhead.py --quick          # a smoke run, ~1 min

What each side runs (`router_stacks`):

    direct         the load client straight to a fixed-cost OpenAI worker (`openai_worker.py`:
                   no compute, `--output-tokens` tokens, `--first-token-ms` / `--token-ms`
                   waits, 0 by default): the baseline every "added" figure subtracts
    vllm-router    vllm-router 0.1.17 (PyPI) over that worker, --policy cache_aware
    sglang-router  sglang-router 0.3.2 (PyPI) over that worker, --policy cache_aware
    prfaas-pd-p    `prfaas router` over three emulated `prfaas instance`s (prfaas-1t, time and
                   KV bytes x 1e-6: no compute, no bytes to speak of), t above every prompt:
                   every request takes the PD-P path (tokenize, prefill on pdp-0, KV to pdd-0,
                   decode there)
    prfaas-prfaas  the same with t = 0: every request prefills on the PrfaaS cluster
                   (prfaas-0) and its KV crosses the (unshaped: 100 Gbit/s, RTT 0) link

The peers cannot route to prfaas instances (they speak prfaas's instance protocol, not
OpenAI's) and prfaas's router cannot route to an OpenAI worker, so the backends are the same
in cost, not in code: both answer at once. prfaas's figure therefore holds its router and
its instances' HTTP shells (the calls of `round_trips`), the peers' their router alone: that
is the serving path each design has.

Per system and prompt length (`--prompt-tokens`, one character a token), after a warm-up:

    latency      `--latency-requests` streamed requests, one every 1/`--rate` s (open loop):
                 TTFT and E2E p50/p90/p99, and TTFT minus direct's ("added")
    throughput   `--concurrency` requests in flight for `--duration` s (closed loop):
                 completed requests/s, outcomes by status, the router process's CPU (all
                 its threads) and so requests per router-core-second, the backends' CPU
                 (the worker, or prfaas's three instances) and the client's (a client near
                 one core would cap every system alike)

`round_trips`: prfaas again, each instance behind a counting proxy (`counting_proxy`), one
request at a time of each `--count-tokens` length per path: the router's calls to
instances before the first token, how many of them one after another, and their bytes.

The host is shared (2 cores, other engineers' tests): the load averages before and after are
printed, and every comparison is a ratio within this run. Prints JSON (`provenance.emit`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from counting_proxy import CountingProxy, measured
from load_client import (
    Outcome,
    Target,
    closed_loop,
    completion_body,
    filler,
    open_loop,
    percentiles_ms,
    prompt,
)
from provenance import emit, git_sha, host
from router_stacks import (
    MODEL,
    PEERS,
    Processes,
    cpu_s,
    ensure_peer_venv,
    start_peer,
    start_prfaas,
    start_workers,
)

#: prfaas systems: name -> t (tokens). Above every prompt: PD-P; 0: PrfaaS.
PRFAAS_PATHS = {"prfaas-pd-p": 10**9, "prfaas-prfaas": 0}
SYSTEMS = ("direct", *PEERS, *PRFAAS_PATHS)
WARMUP_REQUESTS = 5


@dataclass(frozen=True, slots=True)
class Settings:
    prompt_tokens: tuple[int, ...]
    count_tokens: tuple[int, ...]
    output_tokens: int
    rate_per_s: float
    latency_requests: int
    concurrency: int
    duration_s: float
    first_token_ms: float
    token_ms: float


class Prompts:
    """Request bodies of one length, each prompt unique (a counter shared by every phase)."""

    def __init__(self, settings: Settings) -> None:
        self.output_tokens = settings.output_tokens
        self.text = filler(max(settings.prompt_tokens + settings.count_tokens))
        self.next_index = 0

    def body(self, num_tokens: int) -> bytes:
        self.next_index += 1
        text = prompt(num_tokens, self.next_index, self.text)
        return completion_body(MODEL, text, self.output_tokens)


def _outcomes(outcomes: list[Outcome]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for o in outcomes:
        key = str(o.status) if o.is_ok or o.status else "broken"
        by_status[key] = by_status.get(key, 0) + 1
    errors = sorted({o.error for o in outcomes if o.error})[:3]
    return {"ok": sum(o.is_ok for o in outcomes), "by_status": by_status, "errors": errors}


@dataclass(frozen=True, slots=True)
class Served:
    """Where a system takes requests, and the processes whose CPU the throughput phase counts."""

    port: int
    router_pid: int | None  # None: the direct baseline
    backend_pids: tuple[int, ...]  # the workers, or prfaas's instances


def _cpu(pids: tuple[int, ...]) -> float:
    return sum(cpu_s(pid) for pid in pids)


async def measure(served: Served, num_tokens: int, s: Settings, prompts: Prompts) -> dict[str, Any]:
    """Warm-up, then the latency and throughput phases of one system at one length."""
    target = Target("127.0.0.1", served.port)
    try:
        for _ in range(WARMUP_REQUESTS):
            await target.complete(prompts.body(num_tokens))
        bodies = [prompts.body(num_tokens) for _ in range(s.latency_requests)]
        outcomes = await open_loop(target, bodies, s.rate_per_s)
        router = () if served.router_pid is None else (served.router_pid,)
        cpu0 = (_cpu(router), _cpu(served.backend_pids))
        run = await closed_loop(
            target, lambda _: prompts.body(num_tokens), s.concurrency, s.duration_s
        )
        router_cpu = _cpu(router) - cpu0[0] if router else None
        backend_cpu = _cpu(served.backend_pids) - cpu0[1]
    finally:
        target.close()
    ok = [o for o in outcomes if o.is_ok]
    latency = {
        "ttft_ms": percentiles_ms([o.ttft_s for o in ok if o.ttft_s is not None]),
        "e2e_ms": percentiles_ms([o.e2e_s for o in ok]),
        **_outcomes(outcomes),
    }
    done = sum(o.is_ok for o in run.outcomes)
    throughput = {
        "requests_per_s": round(done / run.wall_s, 1),
        "router_core_fraction": None if router_cpu is None else round(router_cpu / run.wall_s, 3),
        "requests_per_router_core_s": None if not router_cpu else round(done / router_cpu, 1),
        "backend_core_fraction": round(backend_cpu / run.wall_s, 3),
        "client_core_fraction": round(run.client_cpu_s / run.wall_s, 3),
        "ttft_ms": percentiles_ms([o.ttft_s for o in run.outcomes if o.ttft_s is not None]),
        **_outcomes(run.outcomes),
    }
    return {"latency": latency, "throughput": throughput}


async def _measure_all(served: Served, s: Settings, prompts: Prompts) -> dict[str, Any]:
    return {str(n): await measure(served, n, s, prompts) for n in s.prompt_tokens}


async def _routing_decisions(port: int) -> dict[str, float]:
    """The router's decisions by path so far (its /metrics), to show which path ran."""
    async with httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    paths: dict[str, float] = {}
    for m in re.finditer(
        r'^prfaas:routing_decisions_total\{path="([^"]+)"[^}]*\} (\S+)', text, re.M
    ):
        paths[m[1]] = paths.get(m[1], 0.0) + float(m[2])
    return paths


async def run_system(
    name: str, s: Settings, work: Path, direct: Served, prompts: Prompts
) -> dict[str, Any]:
    """One system started, measured at every length, stopped (`direct`: the workers)."""
    with Processes(work) as procs:
        if name == "direct":
            return {"by_prompt_tokens": await _measure_all(direct, s, prompts)}
        if name in PEERS:
            port, pid = await start_peer(procs, name, [direct.port])
            served = Served(port, pid, direct.backend_pids)
            return {"by_prompt_tokens": await _measure_all(served, s, prompts)}
        port, pids = await start_prfaas(procs, PRFAAS_PATHS[name])
        router = pids.pop("router")
        rows = await _measure_all(Served(port, router, tuple(pids.values())), s, prompts)
        return {"by_prompt_tokens": rows, "routing_decisions": await _routing_decisions(port)}


async def count_round_trips(s: Settings, work: Path, prompts: Prompts) -> dict[str, Any]:
    """Per prfaas path and `--count-tokens` length: one request's calls to the instances
    before its first token, through counting proxies (after one warm-up request)."""
    return {name: await _count_path(t, s, work, prompts) for name, t in PRFAAS_PATHS.items()}


async def _count_path(
    threshold_tokens: int, s: Settings, work: Path, prompts: Prompts
) -> dict[str, Any]:
    proxies: list[CountingProxy] = []

    async def interpose(instance: str, port: int) -> int:
        proxy = CountingProxy(instance, port)
        await proxy.start()
        proxies.append(proxy)
        return proxy.port

    rows: dict[str, Any] = {}
    with Processes(work) as procs:
        port, _ = await start_prfaas(procs, threshold_tokens, interpose)
        target = Target("127.0.0.1", port)
        for num_tokens in s.count_tokens:
            await target.complete(prompts.body(num_tokens))
            outcome = await target.complete(prompts.body(num_tokens))
            rows[str(num_tokens)] = measured(proxies, outcome)
        target.close()
        for proxy in proxies:
            await proxy.stop()
    return rows


def _added(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    mine, theirs = row["latency"]["ttft_ms"], base["latency"]["ttft_ms"]
    return {
        q: None if mine[q] is None or theirs[q] is None else round(mine[q] - theirs[q], 3)
        for q in mine
    }


def summary(systems: dict[str, Any]) -> dict[str, Any]:
    """Per prompt length and router: TTFT added over direct, requests/s, requests per
    router-core-second, and that last as a ratio to the fastest peer's (within this run)."""
    direct = systems.get("direct", {}).get("by_prompt_tokens", {})
    out: dict[str, Any] = {}
    for size, base in direct.items():
        rows = {
            name: row["by_prompt_tokens"][size]
            for name, row in systems.items()
            if name != "direct" and size in row.get("by_prompt_tokens", {})
        }
        per_core = [
            rows[p]["throughput"]["requests_per_router_core_s"]
            for p in PEERS
            if p in rows and rows[p]["throughput"]["requests_per_router_core_s"]
        ]
        fastest = max(per_core, default=None)
        out[size] = {
            name: {
                "added_ttft_ms": _added(row, base),
                "requests_per_s": row["throughput"]["requests_per_s"],
                "requests_per_router_core_s": row["throughput"]["requests_per_router_core_s"],
                "per_core_vs_fastest_peer": None
                if not fastest or not row["throughput"]["requests_per_router_core_s"]
                else round(row["throughput"]["requests_per_router_core_s"] / fastest, 3),
            }
            for name, row in rows.items()
        }
    return out


FULL = {"prompt_tokens": "1024,32768", "count_tokens": "1024,10240,102400",
        "latency_requests": 100, "concurrency": 16, "duration": 10.0}  # fmt: skip
QUICK = {"prompt_tokens": "1024", "count_tokens": "1024,102400",
         "latency_requests": 30, "concurrency": 4, "duration": 2.0}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: " + str(QUICK))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="any of " + ",".join(SYSTEMS))
    ap.add_argument("--prompt-tokens", help=f"lengths measured (default {FULL['prompt_tokens']})")
    ap.add_argument("--count-tokens", help=f"lengths counted (default {FULL['count_tokens']})")
    ap.add_argument("--latency-requests", type=int)
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--duration", type=float, help="seconds of each throughput phase")
    ap.add_argument("--rate", type=float, default=10.0, help="requests/s of the latency phase")
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--first-token-ms", type=float, default=0.0, help="the worker's wait")
    ap.add_argument("--token-ms", type=float, default=0.0, help="the worker's wait per token")
    ap.add_argument("--no-bootstrap", action="store_true", help="never build the peers' venv")
    ap.add_argument("--save", default=None)
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    return args


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def settings(args: argparse.Namespace) -> Settings:
    return Settings(
        prompt_tokens=_ints(args.prompt_tokens),
        count_tokens=_ints(args.count_tokens),
        output_tokens=args.output_tokens,
        rate_per_s=args.rate,
        latency_requests=args.latency_requests,
        concurrency=args.concurrency,
        duration_s=args.duration,
        first_token_ms=args.first_token_ms,
        token_ms=args.token_ms,
    )


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    s = settings(args)
    chosen = [n for n in SYSTEMS if n in args.systems.split(",")]
    skipped = ensure_peer_venv(not args.no_bootstrap) if set(chosen) & set(PEERS) else None
    prompts = Prompts(s)
    systems: dict[str, Any] = {}
    with Processes(work) as workers:
        (port,) = start_workers(workers, 1, s.first_token_ms, s.token_ms)
        direct = Served(port, None, tuple(c.pid for c in workers.children.values()))
        for name in chosen:
            if name in PEERS and skipped is not None:
                systems[name] = {"not_run": skipped}
                continue
            print(f"router_overhead: {name}", file=sys.stderr, flush=True)
            try:
                systems[name] = await run_system(name, s, work, direct, prompts)
            except RuntimeError as err:  # did not start: reported, the others still run
                systems[name] = {"not_run": str(err)}
    print("router_overhead: round trips", file=sys.stderr, flush=True)
    counted = await count_round_trips(s, work, prompts) if s.count_tokens else {}
    return {"systems": systems, "summary": summary(systems), "round_trips": counted}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    load_before, start_s = os.getloadavg(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="router-overhead-") as tmp:
        body = asyncio.run(run(args, Path(tmp)))
    result = {
        "benchmark": "router_overhead",
        "config": {k: v for k, v in vars(args).items() if k != "save"},
        "versions": PEERS,
        "git_sha": git_sha(),
        "host": host(),
        "loadavg_before_after": [
            [round(x, 2) for x in load_before],
            [round(x, 2) for x in os.getloadavg()],
        ],
        "wall_s": round(time.monotonic() - start_s, 1),
        **body,
    }
    emit(result, args.save)


if __name__ == "__main__":
    main()
