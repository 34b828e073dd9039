"""Benchmark of the hybrid prefix cache pool on the Mooncake conversation trace.

Replays ../shared/traces/mooncake_conversation_trace.jsonl (12,031 requests, 512-token hash
blocks) through `prfaas.kvcache` and prints one JSON object:

- throughput: requests/s of match + allocate + commit + release through one pool (a dense and
  a hybrid model), side by side with a plain dict-of-hashes prefix lookup in the same run (the
  floor of what prefix bookkeeping can cost), and the global index's query latency;
- hit rate: the unbounded pool against the trace's own 36.6% and against an idealised
  infinite token-level cache, and what vLLM's page unification (inflating the attention block
  to the state size) would cost on the same trace;
- hit rate vs capacity for each snapshot policy on Kimi-Linear-48B (PNG under --out);
- padding: the page alignment rule's overhead for every catalog model.

    .venv/bin/python benchmarks/kvcache_bench.py [--out DIR] [--record]

`--record` appends the results as a section of docs/benchmarks.md. The cyclic garbage
collector is paused inside timed loops, for the pool and the baseline alike.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prfaas.kvcache import (
    MOONCAKE_BLOCK_TOKENS,
    Allocation,
    CacheConfig,
    CacheRequest,
    ClusterId,
    GlobalKVCacheIndex,
    HashScheme,
    HybridPrefixCache,
    InstanceId,
    PageLayout,
    RequestId,
    SnapshotPolicy,
    model_fingerprint,
    replay_sequential,
)
from prfaas.specs.catalog import get_model, model_names
from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    MlaAttention,
    ModelSpec,
)
from provenance import git_sha, host

REPO_ROOT = Path(__file__).resolve().parent.parent
TRACE = REPO_ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
GIB = 2**30
B = MOONCAKE_BLOCK_TOKENS
HYBRID_MODEL, DENSE_MODEL = "kimi-linear-48b", "qwen3-235b"
CAPACITIES_GIB = (64, 128, 256, 512, 1024, 4096, 16384)
POLICIES = {
    "every block": SnapshotPolicy.every_block(),
    "every 4 blocks": SnapshotPolicy.every_k_blocks(4),
    "request end": SnapshotPolicy.request_end(),
    "request end + junction": SnapshotPolicy.junction(),
}
UNBOUNDED_PAGES = 10**12


@dataclass(frozen=True, slots=True)
class Row:
    input_length: int
    hash_ids: tuple[int, ...]


def load_trace(path: Path) -> list[Row]:
    with path.open() as lines:
        return [Row(r["input_length"], tuple(r["hash_ids"])) for r in map(json.loads, lines)]


def to_requests(scheme: HashScheme, rows: Sequence[Row]) -> list[CacheRequest]:
    return [
        scheme.mooncake_request(RequestId(str(i)), row.hash_ids, row.input_length)
        for i, row in enumerate(rows)
    ]


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn(*args)
        return time.perf_counter() - start, result
    finally:
        gc.enable()


def config_for(spec: ModelSpec, policy: SnapshotPolicy, num_pages: int) -> CacheConfig:
    return CacheConfig.for_model(spec, block_tokens=B, num_pages=num_pages, snapshot_policy=policy)


# --- throughput --------------------------------------------------------------------------


def dict_baseline(requests: Sequence[CacheRequest]) -> int:
    """Longest prefix in a dict of chained hashes, then insert the rest: no pages, no state."""
    seen: dict[int, int] = {}
    hits = 0
    for request in requests:
        hashes = request.block_hashes
        hit = 0
        for h in hashes:
            if h not in seen:
                break
            hit += 1
        hits += hit
        for h in hashes[hit:]:
            seen[h] = 1
    return hits


def pool_loop(cache: HybridPrefixCache, requests: Sequence[CacheRequest]) -> list[int]:
    """The router-and-engine sequence per request; returns each request's hit blocks."""
    hits = []
    for request in requests:
        match = cache.match(request)
        allocation = cache.allocate(request, match)
        assert isinstance(allocation, Allocation)
        cache.commit(request.request_id)
        cache.release(request.request_id)
        cache.take_events()
        hits.append(match.hit_blocks)
    return hits


def throughput(rows: Sequence[Row]) -> tuple[dict[str, Any], list[int]]:
    out: dict[str, Any] = {}
    hybrid = get_model(HYBRID_MODEL)
    scheme = HashScheme(B, model_fingerprint(hybrid))
    hash_s, requests = timed(to_requests, scheme, rows)
    num_blocks = sum(len(r.block_hashes) for r in requests)
    out["hashing_blocks_per_s"] = round(num_blocks / hash_s)
    base_s, base_hits = timed(dict_baseline, requests)
    out["dict_baseline"] = {"requests_per_s": round(len(rows) / base_s), "hit_blocks": base_hits}
    hybrid_hits: list[int] = []
    for label, name in (("pool_dense", DENSE_MODEL), ("pool_hybrid", HYBRID_MODEL)):
        spec = get_model(name)
        config = replace(
            config_for(spec, POLICIES["every block"], UNBOUNDED_PAGES), hash_scheme=scheme
        )
        cache = HybridPrefixCache(config, InstanceId("bench"))
        seconds, hits = timed(pool_loop, cache, requests)
        out[label] = {
            "model": name,
            "requests_per_s": round(len(rows) / seconds),
            "blocks_per_s": round(num_blocks / seconds),
            "vs_dict_baseline": round(base_s / seconds, 3),
            "hit_blocks": sum(hits),
        }
        hybrid_hits = hits
        out[label]["padding_share_of_cached_bytes"] = round(cached_padding_share(cache), 4)
    return out, hybrid_hits


def cached_padding_share(cache: HybridPrefixCache) -> float:
    """Share of the bytes of everything cached at the end of a replay that is padding."""
    groups = cache.layout.groups
    used = padded = 0
    for block in cache.pool.blocks():
        group = groups[block.group_index]
        used += group.allocated_bytes
        padded += group.padding_bytes
    return padded / used


# --- hit rates ---------------------------------------------------------------------------


def ideal_token_level(rows: Sequence[Row]) -> int:
    """Hit tokens of an unbounded token-level cache that knows only the trace's block ids:
    every matched block counts its real tokens, and a prompt that extends an earlier prompt
    (same first k blocks, the earlier one ending inside block k) also reuses that partial
    block's tokens. An upper bound for any block-granular cache on this trace."""
    seen: set[tuple[int, ...]] = set()
    partial_tail: dict[tuple[int, ...], int] = {}
    hit_tokens = 0
    for row in rows:
        ids, length = row.hash_ids, row.input_length
        k = 0
        while k < len(ids) and ids[: k + 1] in seen:
            k += 1
        matched = min(k * B, length)
        if k < len(ids):
            matched += min(partial_tail.get(ids[:k], 0), min(length, (k + 1) * B) - k * B)
        hit_tokens += matched
        seen.update(ids[: i + 1] for i in range(len(ids)))
        if length % B:
            last = len(ids) - 1
            partial_tail[ids[:last]] = max(partial_tail.get(ids[:last], 0), length % B)
    return hit_tokens


def unified_page_block_tokens(spec: ModelSpec) -> int:
    """vLLM's unification: grow the attention block until one layer's page holds one layer's
    state, rounded up to 16 tokens (what made Qwen3-Next blocks 528 tokens, vLLM #40696)."""
    attention = [g for g in spec.mixers if isinstance(g, GqaAttention | MlaAttention)]
    linear = [g for g in spec.mixers if isinstance(g, LinearAttention)]
    per_token = min(g.kv_bytes_per_token() // g.num_layers for g in attention)
    per_state = max(g.state_bytes(0) // g.num_layers for g in linear)
    block_tokens = -(-per_state // per_token)  # ceiling division
    return -(-block_tokens // 16) * 16


def hit_rates(rows: Sequence[Row], hybrid_hits: Sequence[int]) -> dict[str, Any]:
    total_blocks = sum(len(r.hash_ids) for r in rows)
    total_tokens = sum(r.input_length for r in rows)
    pool_tokens = [min(h * B, r.input_length) for h, r in zip(hybrid_hits, rows, strict=True)]
    out: dict[str, Any] = {
        "trace_reusable_block_fraction_quoted": 0.366,
        "pool_unbounded_block_fraction": round(sum(hybrid_hits) / total_blocks, 4),
        "pool_unbounded_token_fraction": round(sum(pool_tokens) / total_tokens, 4),
        "ideal_token_level_fraction": round(ideal_token_level(rows) / total_tokens, 4),
        "unified_page": {},
    }
    for name in model_names():
        spec = get_model(name)
        if not any(isinstance(g, LinearAttention) for g in spec.mixers):
            continue
        unified = unified_page_block_tokens(spec)
        tokens = sum(t // unified * unified for t in pool_tokens)
        out["unified_page"][name] = {
            "block_tokens": unified,
            "token_fraction": round(tokens / total_tokens, 4),
        }
    return out


# --- capacity curve (two worker processes) -------------------------------------------------


def attention_only(spec: ModelSpec) -> ModelSpec:
    """The same model with its state groups dropped: what the curve would be if state were free."""
    mixers = tuple(g for g in spec.mixers if isinstance(g, GqaAttention | MlaAttention))
    layers = sum(g.num_layers for g in mixers)
    return ModelSpec(
        f"{spec.name}-attention-only",
        spec.hidden_size,
        spec.vocab_size,
        mixers,
        (DenseMlp(layers, 1),),
    )


#: Per worker process: the trace hashed once (set by `init_worker`, read by `curve_point`).
_worker_requests: list[CacheRequest] = []


def init_worker(rows: list[Row]) -> None:
    spec = get_model(HYBRID_MODEL)
    _worker_requests.extend(to_requests(HashScheme(B, model_fingerprint(spec)), rows))


def curve_point(task: tuple[str, int]) -> dict[str, Any]:
    variant, capacity_gib = task
    spec = get_model(HYBRID_MODEL)
    scheme = HashScheme(B, model_fingerprint(spec))
    if variant == "attention only":
        spec = attention_only(spec)
    layout = PageLayout.from_model(spec, B)
    num_pages = capacity_gib * GIB // layout.page_bytes
    config = CacheConfig(layout, num_pages, scheme, POLICIES.get(variant, SnapshotPolicy()))
    gc.disable()
    stats = replay_sequential(HybridPrefixCache(config, InstanceId("curve")), _worker_requests)
    return {
        "variant": variant,
        "capacity_gib": capacity_gib,
        "block_hit_fraction": round(stats.block_hit_fraction, 4),
        "token_hit_fraction": round(stats.token_hit_fraction, 4),
        "rejected": stats.num_rejected,
    }


def capacity_curve(rows: list[Row], out_dir: Path) -> dict[str, Any]:
    variants = [*POLICIES, "attention only"]
    tasks = [(v, c) for v in variants for c in CAPACITIES_GIB]
    with ProcessPoolExecutor(max_workers=2, initializer=init_worker, initargs=(rows,)) as workers:
        points = list(workers.map(curve_point, tasks))
    monotone = {}
    for variant in variants:
        rates = [p["block_hit_fraction"] for p in points if p["variant"] == variant]
        monotone[variant] = all(a <= b for a, b in itertools.pairwise(rates))
    png = out_dir / "kvcache_hit_rate_vs_capacity.png"
    plot_curve(points, variants, png)
    return {"model": HYBRID_MODEL, "points": points, "monotone": monotone, "png": str(png)}


def plot_curve(points: list[dict[str, Any]], variants: list[str], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for variant in variants:
        mine = [p for p in points if p["variant"] == variant]
        style = "--" if variant == "attention only" else "-"
        xs = [p["capacity_gib"] for p in mine]
        ax.plot(xs, [p["block_hit_fraction"] for p in mine], style, marker="o", label=variant)
    ax.axhline(0.366, color="grey", linewidth=0.8, label="trace: 36.6% reusable")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pool capacity (GiB), Kimi-Linear-48B, 512-token blocks")
    ax.set_ylabel("prefix hit rate (fraction of blocks)")
    ax.set_title("Hit rate vs capacity per snapshot policy (Mooncake conversation trace)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- padding and the index ------------------------------------------------------------------


def padding(rows: Sequence[Row]) -> dict[str, Any]:
    """Static padding of every catalog model's layout, plus the slack a partial last block
    leaves in its page (the trace's prompts, 512-token blocks)."""
    slots = sum(len(r.hash_ids) * B for r in rows)
    out: dict[str, Any] = {
        "partial_block_slack_share": round(1 - sum(r.input_length for r in rows) / slots, 4)
    }
    for name in model_names():
        layout = PageLayout.from_model(get_model(name), B)
        out[name] = {
            "page_bytes": layout.page_bytes,
            "pages_per_block": layout.pages_per_block,
            "groups": {
                g.name: {
                    "pages": g.pages_per_unit,
                    "padding_fraction": round(g.padding_fraction, 4),
                }
                for g in layout.groups
            },
        }
    return out


def index_latency(rows: Sequence[Row], num_instances: int = 8) -> dict[str, Any]:
    """Eight instances (2 PrfaaS, 6 PD) serve the trace round-robin; the router then queries
    every prompt. Checks the index against each pool's own match on a sample."""
    spec = get_model(HYBRID_MODEL)
    config = config_for(spec, SnapshotPolicy.junction(), UNBOUNDED_PAGES)
    index = GlobalKVCacheIndex(config.identity)
    caches = []
    for i in range(num_instances):
        cache = HybridPrefixCache(config, InstanceId(f"inst{i}"))
        index.register_instance(
            cache.instance_id, ClusterId("prfaas" if i < 2 else "pd"), config.identity
        )
        caches.append(cache)
    requests = to_requests(config.hash_scheme, rows)
    for i, cache in enumerate(caches):
        replay_sequential(cache, requests[i::num_instances], index.apply)
    seconds, _ = timed(lambda: [index.match(r.block_hashes) for r in requests])
    agree = all(
        index.match(r.block_hashes).per_instance[c.instance_id] == c.match(r).hit_blocks
        for r in requests[::37]
        for c in caches
    )
    return {
        "instances": num_instances,
        "clusters": 2,
        "queries_per_s": round(len(requests) / seconds),
        "mean_query_us": round(seconds / len(requests) * 1e6, 1),
        "mean_blocks_per_query": round(
            sum(len(r.block_hashes) for r in requests) / len(requests), 1
        ),
        "agrees_with_pools": agree,
    }


# --- report ----------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    t, h, idx = result["throughput"], result["hit_rate"], result["index"]
    curve = result["capacity_curve"]
    lines = [
        f"\n## kvcache: hybrid prefix cache pool ({result['git_sha']},"
        f" {result['host']['cpus']} CPUs, Python {result['host']['python']})\n",
        f"`{result['command']}`, {result['elapsed_s']} s, trace of {result['trace']['requests']:,}"
        f" requests / {result['trace']['blocks']:,} blocks of 512 tokens.\n",
        "| per request: match+allocate+commit+release | requests/s | vs dict of hashes |",
        "|---|---|---|",
        f"| dict-of-hashes prefix lookup (floor) | {t['dict_baseline']['requests_per_s']:,} | 1 |",
    ]
    for key in ("pool_dense", "pool_hybrid"):
        p = t[key]
        lines.append(f"| pool, {p['model']} | {p['requests_per_s']:,} | {p['vs_dict_baseline']} |")
    lines += [
        "",
        f"Global index, {idx['instances']} instances in {idx['clusters']} clusters: "
        f"{idx['queries_per_s']:,} queries/s ({idx['mean_query_us']} us per query of "
        f"{idx['mean_blocks_per_query']} blocks); agrees with every pool:"
        f" {idx['agrees_with_pools']}.",
        "",
        f"Hashing: {t['hashing_blocks_per_s']:,} blocks/s. Padding: "
        f"{t['pool_hybrid']['padding_share_of_cached_bytes']:.1%} of the bytes cached by the"
        f" unbounded {t['pool_hybrid']['model']} pool (snapshots at every block); partial last"
        f" blocks leave {result['padding']['partial_block_slack_share']:.1%} of token slots empty.",
        "",
        f"Unbounded pool: {h['pool_unbounded_block_fraction']:.1%} of blocks reused (trace: 36.6%),"
        f" {h['pool_unbounded_token_fraction']:.1%} of tokens at 512-token blocks; ideal"
        f" token-level cache: {h['ideal_token_level_fraction']:.1%} of tokens.",
        "",
        "| vLLM-style unified page | block tokens | token hit fraction |",
        "|---|---|---|",
    ]
    lines += [
        f"| {name} | {u['block_tokens']} | {u['token_fraction']:.1%} |"
        for name, u in h["unified_page"].items()
    ]
    lines += [
        "",
        "| Kimi-Linear-48B, block hit rate | "
        + " | ".join(f"{c} GiB" for c in CAPACITIES_GIB)
        + " |",
        "|---" * (len(CAPACITIES_GIB) + 1) + "|",
    ]
    for variant in curve["monotone"]:
        rates = [p for p in curve["points"] if p["variant"] == variant]
        lines.append(
            f"| {variant} | " + " | ".join(f"{p['block_hit_fraction']:.1%}" for p in rates) + " |"
        )
    falling = [v for v, ok in curve["monotone"].items() if ok]
    lines.append(f"\nFalls monotonically as capacity shrinks: {', '.join(falling)}.\n")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "kvcache_bench")
    parser.add_argument("--record", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = load_trace(args.trace)
    speed, hybrid_hits = throughput(rows)
    result: dict[str, Any] = {
        "benchmark": "kvcache",
        "command": "python benchmarks/kvcache_bench.py" + (" --record" if args.record else ""),
        "git_sha": git_sha(),
        "host": host(),
        "config": {"block_tokens": B, "trace": str(args.trace), "capacities_gib": CAPACITIES_GIB},
        "trace": {
            "requests": len(rows),
            "blocks": sum(len(r.hash_ids) for r in rows),
            "tokens": sum(r.input_length for r in rows),
        },
        "throughput": speed,
        "index": index_latency(rows),
        "hit_rate": hit_rates(rows, hybrid_hits),
        "padding": padding(rows),
        "capacity_curve": capacity_curve(rows, args.out),
    }
    result["elapsed_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=2))
    if args.record:
        with (REPO_ROOT / "docs" / "benchmarks.md").open("a") as doc:
            doc.write(markdown(result))


if __name__ == "__main__":
    main(sys.argv[1:])
