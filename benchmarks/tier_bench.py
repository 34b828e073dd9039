"""The prefix cache's disk tier (issue 28): what it buys in the simulator, and how fast the live
disk tier reads back against `dd` on the same disk in the same run.

    .venv/bin/python benchmarks/tier_bench.py [--requests N] [--record out.json]

1. Simulator: the Mooncake conversation trace on the paper's case study, the deployment pinned
   to the planner's ideal-mode choice for both runs, each prefill instance's DRAM pool capped so
   that all of them together hold 25% of the trace's working set (its distinct blocks of
   attention KV); DRAM only against DRAM plus a disk tier that can hold the whole working set
   per instance, read at `--disk-read-gib-per-s`. Reports token hit rate, prefill tokens saved
   and P90 TTFT.
2. Live disk tier: the engine's `FileTierStorage` behind a `HybridPrefixCache` with real torch
   pages; a prompt's units are demoted to files, dropped from the page cache
   (posix_fadvise DONTNEED), and promoted back; bytes promoted / seconds, against
   `dd if=<file> of=/dev/null bs=<unit>` over a file of the same size, also cold. The ratio is
   the figure: both read the same disk in the same run.
3. With `--live`: a bounded slice of the trace (whole conversations) on a live emulated
   deployment, DRAM only against DRAM plus disk, beside the simulator on the same arrivals
   (`tier_live.py`: hit rate, prefill tokens saved, P90 TTFT).

Prints JSON (metrics, resolved config, git SHA, host, load average). Not collected by pytest;
the trace is read from ../shared/traces and never copied into the repository.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from prfaas.engine.disk_tier import FileTierStorage
from prfaas.engine.storage import TorchPageStorage
from prfaas.kvcache import (
    CacheConfig,
    CacheRequest,
    HybridPrefixCache,
    InstanceId,
    Medium,
    OutOfPages,
    RequestId,
    SnapshotPolicy,
    TierSpec,
)
from prfaas.kvcache.tiers import UnitKey
from prfaas.planner.scenario import DeploymentFile, SimulationFile, read_scenario_file
from prfaas.sim.api import build_scenario, simulate_body, with_trace
from prfaas.sim.config import build_run_config
from prfaas.specs.catalog import get_model
from prfaas.workload.trace import read_mooncake_trace
from provenance import emit, git_sha, host
from tier_live import bench_live

TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
)
GIB = 2**30
DRAM_SHARE = 0.25


def working_set_gib(
    model_name: str, block_tokens: int, num_requests: int | None
) -> tuple[int, int, float]:
    """Input tokens and distinct blocks of the trace (its first `num_requests`), and those
    blocks' attention KV in GiB (the pool's working set)."""
    requests = read_mooncake_trace(TRACE, block_tokens)[:num_requests]
    distinct = {h for r in requests for h in r.hash_ids}
    layout = CacheConfig.for_model(get_model(model_name), block_tokens=block_tokens, num_pages=1)
    block_bytes = sum(g.allocated_bytes for g in layout.layout.attention_groups)
    input_tokens = sum(r.input_tokens for r in requests)
    return input_tokens, len(distinct), len(distinct) * block_bytes / GIB


def bench_simulator(num_requests: int | None, disk_read_gib_per_s: float) -> dict[str, Any]:
    body, base = read_scenario_file("paper-case-study")
    body = with_trace(body, TRACE)
    sim = (body.simulation or SimulationFile()).model_copy(update={"plan_mode": "ideal"})
    body = body.model_copy(update={"simulation": sim})
    if num_requests is not None and body.arrivals is not None:
        body = body.model_copy(
            update={"arrivals": body.arrivals.model_copy(update={"num_requests": num_requests})}
        )
    config = build_run_config(build_scenario(body, base, "tiers"), body, base, "prfaas")
    d = config.deployment
    num_prefill = d.n_prfaas + d.n_p
    input_tokens, distinct, ws_gib = working_set_gib(body.model, config.block_tokens, num_requests)
    dram_gib = DRAM_SHARE * ws_gib / num_prefill
    pinned = DeploymentFile(
        n_prfaas=d.n_prfaas, n_p=d.n_p, n_d=d.n_d, threshold_tokens=d.threshold_tokens
    )
    out: dict[str, Any] = {
        "deployment": {"n_prfaas": d.n_prfaas, "n_p": d.n_p, "n_d": d.n_d, "t": d.threshold_tokens},
        "distinct_blocks": distinct,
        "working_set_gib": ws_gib,
        "dram_gib_per_instance": dram_gib,
        "disk_gib_per_instance": ws_gib,
        "disk_read_gib_per_s": disk_read_gib_per_s,
    }
    for name, disk_gib in (("dram_only", 0.0), ("dram_plus_disk", ws_gib)):
        run_sim = sim.model_copy(
            update={
                "deployment": pinned,
                "prefix_cache_gib": dram_gib,
                "prefix_cache_disk_gib": disk_gib,
                "disk_read_gib_per_s": disk_read_gib_per_s,
            }
        )
        start = time.perf_counter()
        run = simulate_body(body.model_copy(update={"simulation": run_sim}), base, name, ["prfaas"])
        report = run[0].report
        summary = report.summary
        out[name] = {
            "token_hit_rate": report.prefix_hit_fraction,
            "prefill_tokens_saved": round(report.prefix_hit_fraction * input_tokens),
            "p90_ttft_s": summary.ttft_s.p90,
            "completed": summary.num_completed,
            "wall_s": time.perf_counter() - start,
        }
    return out


def _drop_cache(path: Path) -> None:
    """Evict a file's clean pages from the page cache, so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class TimedReads:
    """The disk tier's storage, timing its reads: what a promotion spends reading the disk
    (the demotions the same call makes, and the copy into pages, are not counted)."""

    def __init__(self, files: FileTierStorage) -> None:
        self.files = files
        self.read_s = 0.0
        self.read_bytes = 0

    def put(self, key: UnitKey, data: bytes) -> None:
        self.files.put(key, data)

    def get(self, key: UnitKey) -> bytes:
        start = time.perf_counter()
        data = self.files.get(key)
        self.read_s += time.perf_counter() - start
        self.read_bytes += len(data)
        return data

    def delete(self, key: UnitKey) -> None:
        self.files.delete(key)


def bench_disk(directory: Path, total_mib: int) -> dict[str, Any]:
    """Read bandwidth of the live disk tier's promotions against `dd`, both cold, same disk."""
    spec = get_model("qwen3-235b")  # dense attention: one 3 MiB unit per 16-token block
    config = CacheConfig.for_model(
        spec,
        block_tokens=16,
        capacity_bytes=total_mib * 2**20,
        snapshot_policy=SnapshotPolicy.request_end(),
        lower_tier=TierSpec(Medium.DISK, 4 * total_mib * 2**20, 2 * GIB, GIB),
    )
    page_bytes, num_blocks = config.layout.page_bytes, config.num_pages
    files = FileTierStorage(directory / "tier")
    timed = TimedReads(files)
    storage = TorchPageStorage(config.num_pages, page_bytes)
    storage.buffer.random_(0, 255)
    cache = HybridPrefixCache(config, InstanceId("bench"), storage, timed)
    scheme = config.hash_scheme

    def serve(name: str, first_id: int) -> int:
        ids = list(range(first_id, first_id + num_blocks))
        request = CacheRequest(RequestId(name), scheme.hash_external(ids), num_blocks * 16)
        allocation = cache.allocate(request)
        assert not isinstance(allocation, OutOfPages)
        cache.commit(request.request_id)
        cache.release(request.request_id)
        return cache.tier_counters.promoted_bytes

    serve("a", 0)
    serve("b", 10**6)  # every unit of "a" is demoted to a file
    for path in files.directory.glob("*.unit"):
        _drop_cache(path)
    promoted = serve("a-again", 0)
    unit = directory / "dd.bin"
    unit_bytes = config.layout.groups[0].unit_bytes
    with unit.open("wb") as handle:
        handle.write(os.urandom(unit_bytes) * num_blocks)
    _drop_cache(unit)
    done = subprocess.run(
        ["dd", f"if={unit}", "of=/dev/null", f"bs={unit_bytes}"],
        capture_output=True,
        text=True,
        check=True,
    )
    dd_bytes_per_s = _dd_rate(done.stderr)
    direct = subprocess.run(
        ["dd", f"if={unit}", "of=/dev/null", f"bs={unit_bytes}", "iflag=direct"],
        capture_output=True,
        text=True,
        check=True,
    )
    tier_bytes_per_s = timed.read_bytes / timed.read_s
    return {
        "unit_bytes": unit_bytes,
        "units": num_blocks,
        "promoted_bytes": promoted,
        "tier_read_mib_per_s": tier_bytes_per_s / 2**20,
        "dd_read_mib_per_s": dd_bytes_per_s / 2**20,
        "dd_direct_read_mib_per_s": _dd_rate(direct.stderr) / 2**20,
        "ratio": tier_bytes_per_s / dd_bytes_per_s,
    }


def _dd_rate(stderr: str) -> float:
    """Bytes per second from dd's summary line ("N bytes ... copied, S s, ...")."""
    match = re.search(r"(\d+) bytes.*copied, ([\d.]+) s", stderr)
    if match is None:
        raise RuntimeError(f"cannot read dd's output: {stderr!r}")
    return int(match.group(1)) / float(match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=None, help="first N trace requests")
    parser.add_argument("--disk-read-gib-per-s", type=float, default=2.0)
    parser.add_argument("--disk-mib", type=int, default=256, help="bytes the disk test moves")
    parser.add_argument("--record", default=None, help="also write the JSON here")
    parser.add_argument("--live", action="store_true", help="also the live emulated runs")
    parser.add_argument("--slice-mod", type=int, default=60, help="conversations kept: 1 in N")
    parser.add_argument("--arrival-scale", type=float, default=0.11, help="trace gaps x this")
    parser.add_argument("--time-factor", type=float, default=0.45, help="emulated time factor")
    parser.add_argument("--num-prefill", type=int, default=2, help="live PD-P instances")
    parser.add_argument("--max-output-tokens", type=int, default=64)
    args = parser.parse_args()
    load_before = os.getloadavg()
    result: dict[str, Any] = {"git": git_sha(), "host": host(), "trace": str(TRACE)}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        result["live_disk_tier"] = bench_disk(Path(scratch), args.disk_mib)
        if args.live:
            result["live_emulated"] = bench_live(
                TRACE, Path(scratch), mod=args.slice_mod, arrival_scale=args.arrival_scale,
                time_factor=args.time_factor, num_prefill=args.num_prefill,
                read_gib_s=args.disk_read_gib_per_s, max_output=args.max_output_tokens,
            )  # fmt: skip
    result["simulator"] = bench_simulator(args.requests, args.disk_read_gib_per_s)
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    emit(result, args.record)


if __name__ == "__main__":
    main()
