"""The disk tier on a live emulated deployment, beside the simulator on the same arrivals
(issue 28 point 4; `tier_bench.py --live` runs it).

The slice: the conversations of the Mooncake conversation trace whose second block id is a
multiple of `--slice-mod` (every turn of them, so their prefixes repeat as in the whole
trace; the first block, id 0, is everyone's), outputs capped, gaps x `--arrival-scale` (the
modelled arrivals). The deployment: prfaas-1t on emulated h20 instances, `--num-prefill` PD-P
and one PD-D (homogeneous policy), each PD-P's DRAM capped so that all of them together hold
`DRAM_SHARE` of the slice's working set (its distinct blocks of attention KV, as
`tier_bench.working_set_gib` counts it), and in the second run a disk tier of the whole
working set read at `--disk-read-gib-per-s` (emulated: `serve.backends.emulated_disk`). For
each run:

    prfaas simulate -s <scenario> --trace arrivals.jsonl --policy homogeneous --json
    the deployment up in this process (`Launcher`), then
    prfaas bench --trace arrivals.jsonl --time-scale <time_factor> --records ...

Live TTFT is divided by the time factor, so both columns are in modelled seconds. Token hit
rate and prefill tokens saved come from the responses' cached tokens (live) and from the
simulator's report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from prfaas.kvcache import CacheConfig, HybridPrefixCache, InstanceId, RequestId
from prfaas.kvcache.layout import GroupKind
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    DiskTierSpec,
    EmulationSpec,
    InstanceRole,
    InstanceSpec,
    RebalanceSpec,
    RouterSpec,
)
from prfaas.serve.launch.launcher import Launcher
from prfaas.specs.catalog import get_model

ROOT = Path(__file__).resolve().parents[1]
PRFAAS = str(ROOT / ".venv" / "bin" / "prfaas")
MODEL = "prfaas-1t"
BLOCK_TOKENS = 512
MAX_CONTEXT_TOKENS = 135_168
DRAM_SHARE = 0.25
JUNCTION_MARGIN = 2
DECODE_MIB = 102_400
MIB, GIB = 2**20, 2**30


def slice_rows(
    trace: Path, mod: int, arrival_scale: float, max_output: int
) -> list[dict[str, Any]]:
    """The slice's trace lines (module docstring), rebased to t = 0, gaps x `arrival_scale`."""
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    rows = [r for r in rows if len(r["hash_ids"]) > 1 and r["hash_ids"][1] % mod == 0]
    t0 = rows[0]["timestamp"]
    out = []
    for row in rows:
        output = min(max(1, row["output_length"]), max_output)
        inp = min(row["input_length"], MAX_CONTEXT_TOKENS - output - 2)
        out.append(
            {
                "timestamp": round((row["timestamp"] - t0) * arrival_scale),
                "input_length": inp,
                "output_length": output,
                "hash_ids": row["hash_ids"][: -(-inp // BLOCK_TOKENS)],
            }
        )
    return out


def working_set_bytes(rows: list[dict[str, Any]]) -> int:
    """The slice's distinct blocks of attention KV, in real bytes."""
    layout = CacheConfig.for_model(get_model(MODEL), block_tokens=BLOCK_TOKENS, num_pages=1)
    block_bytes = sum(g.allocated_bytes for g in layout.layout.attention_groups)
    return len({h for r in rows for h in r["hash_ids"]}) * block_bytes


def largest_request_bytes(rows: list[dict[str, Any]]) -> int:
    """The pool bytes the slice's largest request needs (blocks, snapshots, decode room, the
    <bos> token, and `JUNCTION_MARGIN` more snapshots for the junctions a warm pool adds): a
    pool below it refuses that request (400), so the DRAM cap stops there."""
    config = CacheConfig.for_model(get_model(MODEL), block_tokens=BLOCK_TOKENS, num_pages=10**5)
    pool = HybridPrefixCache(config, InstanceId("probe"))
    largest = max(rows, key=lambda r: r["input_length"] + r["output_length"])
    tokens = largest["input_length"] + largest["output_length"] + 2
    blocks = list(range(10**9, 10**9 + -(-tokens // BLOCK_TOKENS)))  # unique: no hit
    request = config.hash_scheme.mooncake_request(RequestId("probe"), blocks, tokens)
    states = sum(g.allocated_bytes for g in config.layout.groups if g.kind is GroupKind.STATE)
    return pool.plan(request).num_pages * config.layout.page_bytes + JUNCTION_MARGIN * states


def deployment(
    num_prefill: int, dram_mib: int, disk: DiskTierSpec | None, time_factor: float
) -> Deployment:
    def instance(
        name: str, role: InstanceRole, mib: int, tier: DiskTierSpec | None
    ) -> InstanceSpec:
        return InstanceSpec(
            name=name, role=role, cluster="pd", backend=Backend.EMULATED, chip="h20",
            capacity_mib=mib, max_batch_size=20, disk_tier=tier,
        )  # fmt: skip

    prefill = [
        instance(f"pdp-{k}", InstanceRole.PD_PREFILL, dram_mib, disk) for k in range(num_prefill)
    ]
    return Deployment(
        model=MODEL,
        block_tokens=BLOCK_TOKENS,
        threshold_tokens=10**6,
        policy="homogeneous",
        router=RouterSpec(port=0, request_timeout_s=600),
        emulation=EmulationSpec(time_factor=time_factor),
        rebalance=RebalanceSpec(enabled=False),
        instances=(*prefill, instance("pdd-0", InstanceRole.PD_DECODE, DECODE_MIB, None)),
    )


def scenario_yaml(num_prefill: int, dram_gib: float, disk_gib: float, read_gib_s: float) -> str:
    return (
        "name: tier-live\n"
        f"model: {MODEL}\n"
        "prfaas: {chip: h200, num_gpus: 8, gpus_per_instance: 8}\n"
        f"pd: {{chip: h20, num_gpus: {8 * (num_prefill + 1)}, gpus_per_instance: 8}}\n"
        "link_gbps: 100\n"
        "decode: {slo_tokens_per_s: 40}\n"
        "workload:\n"
        "  input: {lognormal: {mu: 9.9, sigma: 1.0, min_tokens: 128, max_tokens: 128K}}\n"
        "  output: {fixed_tokens: 64}\n"
        "arrivals: {process: poisson, rate_per_s: 1, num_requests: 10}\n"
        "simulation:\n"
        "  policy: homogeneous\n"
        f"  deployment: {{n_prfaas: 0, n_p: {num_prefill}, n_d: 1, threshold_tokens: 1000000}}\n"
        f"  prefix_cache_gib: {dram_gib}\n"
        f"  prefix_cache_disk_gib: {disk_gib}\n"
        f"  disk_read_gib_per_s: {read_gib_s}\n"
        f"  decode_kv_gib: {DECODE_MIB / 1024}\n"
    )


def simulate(
    work: Path, name: str, scenario: str, arrivals: Path, input_tokens: int
) -> dict[str, Any]:
    path = work / f"scenario-{name}.yaml"
    path.write_text(scenario)
    cmd = [PRFAAS, "simulate", "-s", str(path), "--trace", str(arrivals)]
    out = subprocess.run(
        [*cmd, "--policy", "homogeneous", "--json"], capture_output=True, check=True
    )
    report = json.loads(out.stdout)[0]
    hit = report["prefix_hit_fraction"]
    return {
        "token_hit_rate": hit,
        "prefill_tokens_saved": round(hit * input_tokens),
        "p90_ttft_s": report["metrics"]["ttft_s"]["p90"],
        "completed": report["metrics"]["num_completed"],
    }


def live(work: Path, name: str, plan: Deployment, arrivals: Path, n: int) -> dict[str, Any]:
    """`plan` up in this process, the arrivals replayed at its time factor."""
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "tier-live-secret-0123456789")
    save, records = work / f"live-{name}.json", work / f"live-{name}.records.jsonl"
    time_factor = plan.emulation.time_factor
    with Launcher(plan) as launcher:
        launcher.wait_healthy(300)
        bench = [PRFAAS, "bench", "--endpoint", launcher.url, "--trace", str(arrivals)]
        bench += ["--time-scale", str(time_factor), "--num-requests", str(n), "--model", MODEL]
        bench += ["--json", "--save", str(save), "--records", str(records)]
        subprocess.run(bench, capture_output=True, check=False)
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    served = [r for r in rows if r["error"] is None]
    inputs = sum(r["input_tokens"] for r in served)
    cached = sum(r["cached_tokens"] for r in served)
    p90 = json.loads(save.read_text())["metrics"]["ttft_s"]["p90"]
    return {
        "token_hit_rate": cached / max(1, inputs),
        "prefill_tokens_saved": cached,
        "p90_ttft_s": None if p90 is None else p90 / time_factor,
        "completed": len(served),
        "failed": len(rows) - len(served),
    }


def bench_live(
    trace: Path, work: Path, *, mod: int, arrival_scale: float, time_factor: float,
    num_prefill: int, read_gib_s: float, max_output: int,
) -> dict[str, Any]:  # fmt: skip
    """The two runs (DRAM only, DRAM + disk), live and simulated, on the slice."""
    rows = slice_rows(trace, mod, arrival_scale, max_output)
    arrivals = work / "arrivals.jsonl"
    arrivals.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ws = working_set_bytes(rows)
    share_mib = int(DRAM_SHARE * ws / num_prefill / MIB)
    dram_mib = max(share_mib, -(-largest_request_bytes(rows) // MIB))
    disk = DiskTierSpec(capacity_mib=-(-ws // MIB), read_mib_per_s=read_gib_s * 1024)
    input_tokens = sum(r["input_length"] for r in rows)
    out: dict[str, Any] = {
        "slice": {"requests": len(rows), "conversations_mod": mod, "input_tokens": input_tokens},
        "working_set_gib": ws / GIB,
        "dram_gib_per_instance": dram_mib / 1024,
        "dram_share_of_working_set": dram_mib * MIB * num_prefill / ws,
        "disk_gib_per_instance": disk.capacity_mib / 1024,
        "disk_read_gib_per_s": read_gib_s,
        "arrival_scale": arrival_scale,
        "time_factor": time_factor,
        "num_prefill": num_prefill,
    }
    for name, tier in (("dram_only", None), ("dram_plus_disk", disk)):
        disk_gib = 0.0 if tier is None else tier.capacity_mib / 1024
        scenario = scenario_yaml(num_prefill, dram_mib / 1024, disk_gib, read_gib_s)
        plan = deployment(num_prefill, dram_mib, tier, time_factor)
        out[name] = {
            "simulator": simulate(work, name, scenario, arrivals, input_tokens),
            "live": live(work, name, plan, arrivals, len(rows)),
            "load_average_after": os.getloadavg(),
        }
    return out
