"""Reference engine vs transformers' own `generate()`, side by side in one run.

Three measurements on one preset (default `tiny-qwen3-next`, the GDN + GQA hybrid), each
repeated with the engine and transformers interleaved (the order alternates between repeats),
so every ratio compares runs made under the same host load:

- prefill / decode: one request at a time. Prefill tokens/s is prompt tokens / time to first
  token (engine: `submit` + `step()` of a `max_tokens=1` request; transformers:
  `generate(max_new_tokens=1)`), on fresh random prompts (no prefix hit); a second engine
  prefills in one chunk, as `generate()` does, to show what chunking costs. Decode tokens/s is
  (tokens - 1) / (last token time - first token time), from the engine's token callback and a
  streamer passed to `generate()`.
- batch: a workload of `--requests` prompts of `--decode-prompt` tokens, `--decode-tokens`
  greedy output tokens each (EOS ignored on both sides), run by the engine with continuous
  batching at `max_batch_size` 1, 8 and 32, and by `generate()` one request at a time (it and
  batch 1 run the first `--sequential-requests` prompts only). Output tokens / wall time,
  prefill of the short prompts included on both sides.
- TTFT: a 2K-token prompt with 0%, 50% and 90% of it cached. The cached part comes from an
  earlier request for that prefix through the pool (a real prefix hit: attention blocks plus
  the GDN state snapshot at the hit boundary); hits are block aligned, so 90% is 1840 tokens.

    .venv/bin/python benchmarks/engine_bench.py [--preset NAME] [--repeats N] [--threads N]
        [--sections single_request batch ttft] [--chunk-tokens N]    (~1 min on 2 cores)

Prints one JSON object: per-repeat values, medians and the spread (min, max) of every ratio,
the resolved configuration, git SHA and host. Torch runs single-threaded by default: on a
shared 2-core host two intra-op threads stall whenever another process holds one core, which
made a 2-thread run 10x slower and far noisier. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch  # noqa: TID251  (the baseline calls transformers' generate() directly)

from prfaas.engine import (
    Engine,
    EngineConfig,
    LoadedModel,
    SamplingParams,
    TokenEvent,
    build_preset,
)
from prfaas.engine.tokenizer import BYTE_VOCAB_SIZE
from provenance import git_sha, host

BATCH_SIZES = (1, 8, 32)
CACHED_FRACTIONS = (0.0, 0.5, 0.9)
SECTIONS = ("single_request", "batch", "ttft")


# --- helpers ---------------------------------------------------------------------------------


def _prompt(rng: random.Random, num_tokens: int) -> list[int]:
    """Random byte tokens: no two prompts share a block, so nothing hits by accident."""
    return [rng.randrange(BYTE_VOCAB_SIZE) for _ in range(num_tokens)]


def _round(value: float) -> float:
    return float(f"{value:.4g}")


def _summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, spread and every repeat's value (4 significant digits)."""
    return {
        "median": _round(statistics.median(values)),
        "min": _round(min(values)),
        "max": _round(max(values)),
        "values": [_round(v) for v in values],
    }


_T = TypeVar("_T")


def _ordered(names: Sequence[_T], repeat: int) -> list[_T]:
    """Rotate the order each repeat so no side always runs first (or right after a build)."""
    shift = repeat % len(names)
    return list(names[shift:]) + list(names[:shift])


class _Stamps:
    """A `generate()` streamer that only timestamps: put() comes with the prompt first, then
    once per generated token."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_generate(
    loaded: LoadedModel, prompt: Sequence[int], max_new_tokens: int
) -> tuple[list[int], float, list[float]]:
    """transformers' greedy `generate()` of one request, not stopping at EOS:
    (tokens, time to first token, per-token timestamps)."""
    ids = torch.tensor([list(prompt)], dtype=torch.long)
    stamps = _Stamps()
    start = time.perf_counter()
    with torch.no_grad():
        out = loaded.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            eos_token_id=[],  # never stop early, logits untouched (as ignore_eos)
            do_sample=False,
            streamer=stamps,
        )
    token_times = stamps.times[1:]
    return [int(t) for t in out[0, len(prompt) :]], token_times[0] - start, token_times


def engine_request(
    engine: Engine, request_id: str, prompt: Sequence[int], max_tokens: int
) -> tuple[list[int], float, list[float], int]:
    """One request through submit + run: (tokens, time to first token, per-token timestamps,
    cached prompt tokens)."""
    times: list[float] = []

    def stamp(event: TokenEvent) -> None:
        times.append(time.perf_counter())

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    engine.submit(request_id, prompt, params, on_token=stamp)
    (done,) = engine.run()
    return list(done.token_ids), times[0] - start, times, done.num_cached_tokens


def _decode_rate(times: Sequence[float]) -> float:
    return (len(times) - 1) / (times[-1] - times[0])


# --- 1. prefill and decode, one request at a time -------------------------------------------


def bench_single(
    loaded: LoadedModel,
    config: EngineConfig,
    rng: random.Random,
    *,
    lengths: Sequence[int],
    decode_tokens: int,
    repeats: int,
) -> dict[str, Any]:
    """Side `engine` uses the configured chunk size; `engine_one_chunk` prefills each prompt
    in one chunk (as `generate()` does), to separate chunking cost from the rest."""
    engines = {
        "engine": Engine(loaded, config),
        "engine_one_chunk": Engine(
            loaded, EngineConfig(**{**_config_fields(config), "chunk_tokens": max(lengths)})
        ),
    }
    sides = [*engines, "hf"]
    prefill: dict[int, dict[str, list[float]]] = {n: {s: [] for s in sides} for n in lengths}
    decode: dict[str, list[float]] = {"engine": [], "hf": []}
    first_tokens_match = True
    for repeat in range(repeats + 1):  # repeat 0 warms every path up and is dropped
        for n in lengths:
            prompt = _prompt(rng, n)
            firsts: dict[str, int] = {}
            for side in _ordered(sides, repeat):
                gc.collect()
                if side in engines:
                    tokens, ttft, _, hit = engine_request(
                        engines[side], f"p{repeat}-{n}", prompt, 1
                    )
                    assert hit == 0, "a fresh random prompt must not hit the cache"
                else:
                    tokens, ttft, _ = hf_generate(loaded, prompt, 1)
                firsts[side] = tokens[0]
                if repeat:
                    prefill[n][side].append(n / ttft)
            first_tokens_match &= len(set(firsts.values())) == 1
        prompt = _prompt(rng, lengths[0])
        outputs: dict[str, list[int]] = {}
        for side in _ordered(("engine", "hf"), repeat):
            gc.collect()
            if side == "engine":
                outputs[side], _, times, _ = engine_request(
                    engines[side], f"d{repeat}", prompt, decode_tokens
                )
            else:
                outputs[side], _, times = hf_generate(loaded, prompt, decode_tokens)
            if repeat:
                decode[side].append(_decode_rate(times))
        first_tokens_match &= outputs["engine"] == outputs["hf"]
    result: dict[str, Any] = {"tokens_match_hf": first_tokens_match}
    for n in lengths:
        hf = prefill[n]["hf"]
        row: dict[str, Any] = {f"{s}_tokens_per_s": _summary(prefill[n][s]) for s in sides}
        for side in engines:
            row[f"{side}_ratio_vs_hf"] = _summary(
                [e / h for e, h in zip(prefill[n][side], hf, strict=True)]
            )
        result[f"prefill_{n}"] = row
    result[f"decode_after_{lengths[0]}"] = {
        "engine_tokens_per_s": _summary(decode["engine"]),
        "hf_tokens_per_s": _summary(decode["hf"]),
        "engine_ratio_vs_hf": _summary(
            [e / h for e, h in zip(decode["engine"], decode["hf"], strict=True)]
        ),
    }
    return result


# --- 2. continuous batching vs one-at-a-time generate() --------------------------------------


def _engine_workload(
    loaded: LoadedModel, config: EngineConfig, prompts: Sequence[Sequence[int]], tokens: int
) -> tuple[float, list[list[int]]]:
    engine = Engine(loaded, config)
    gc.collect()
    start = time.perf_counter()
    done = engine.generate(prompts, SamplingParams(max_tokens=tokens, ignore_eos=True))
    wall = time.perf_counter() - start
    return wall, [list(c.token_ids) for c in done]


def _hf_workload(
    loaded: LoadedModel, prompts: Sequence[Sequence[int]], tokens: int
) -> tuple[float, list[list[int]]]:
    gc.collect()
    start = time.perf_counter()
    outputs = [hf_generate(loaded, p, tokens)[0] for p in prompts]
    return time.perf_counter() - start, outputs


def bench_batch(
    loaded: LoadedModel,
    config: EngineConfig,
    rng: random.Random,
    *,
    num_requests: int,
    sequential_requests: int,
    prompt_tokens: int,
    decode_tokens: int,
    repeats: int,
) -> dict[str, Any]:
    """Batch 8 and 32 run all `num_requests`; one-request-at-a-time runs (transformers, and
    the engine at batch 1) take the first `sequential_requests` of the same prompts: their
    rate does not depend on how many requests follow each other, and this keeps the run short."""
    sides = ["hf", *(f"engine_batch_{b}" for b in BATCH_SIZES)]
    rates: dict[str, list[float]] = {side: [] for side in sides}
    tokens_match = True
    # warm-up, dropped
    _hf_workload(loaded, [_prompt(rng, prompt_tokens)], 4)
    _engine_workload(loaded, config, [_prompt(rng, prompt_tokens)] * 2, 4)
    for repeat in range(repeats):
        prompts = [_prompt(rng, prompt_tokens) for _ in range(num_requests)]
        outputs: dict[str, list[list[int]]] = {}
        for side in _ordered(sides, repeat):
            batch = 1 if side == "hf" else int(side.rsplit("_", 1)[1])
            share = prompts[:sequential_requests] if batch == 1 else prompts
            if side == "hf":
                wall, outputs[side] = _hf_workload(loaded, share, decode_tokens)
            else:
                engine_config = EngineConfig(**{**_config_fields(config), "max_batch_size": batch})
                wall, outputs[side] = _engine_workload(loaded, engine_config, share, decode_tokens)
            rates[side].append(len(share) * decode_tokens / wall)
        common = outputs["hf"]
        tokens_match &= all(outputs[s][: len(common)] == common for s in sides)
    result: dict[str, Any] = {
        "workload": {
            "requests": num_requests,
            "requests_one_at_a_time": sequential_requests,
            "prompt_tokens": prompt_tokens,
            "output_tokens_per_request": decode_tokens,
        },
        "tokens_match_hf": tokens_match,
        "hf_one_at_a_time_tokens_per_s": _summary(rates["hf"]),
    }
    for b in BATCH_SIZES:
        side = f"engine_batch_{b}"
        result[side] = {
            "tokens_per_s": _summary(rates[side]),
            "ratio_vs_hf": _summary([e / h for e, h in zip(rates[side], rates["hf"], strict=True)]),
        }
    return result


# --- 3. TTFT with part of the prompt cached --------------------------------------------------


def bench_ttft(
    loaded: LoadedModel,
    config: EngineConfig,
    rng: random.Random,
    *,
    prompt_tokens: int,
    repeats: int,
) -> dict[str, Any]:
    engine = Engine(loaded, config)
    block = config.block_tokens
    names = [f"cached_{round(f * 100)}pct" for f in CACHED_FRACTIONS]
    ttft: dict[str, list[float]] = {name: [] for name in names}
    hits: dict[str, int] = {}
    for repeat in range(repeats + 1):  # repeat 0 is a warm-up, dropped
        order = _ordered(list(zip(names, CACHED_FRACTIONS, strict=True)), repeat)
        for name, fraction in order:
            prompt = _prompt(rng, prompt_tokens)
            cached = round(fraction * prompt_tokens / block) * block
            if cached:
                # An earlier request for the prefix; hashing stops before a prompt's last
                # token, so prefix + 1 token leaves exactly `cached` tokens in the pool.
                engine_request(engine, f"warm{repeat}-{name}", prompt[: cached + 1], 1)
            gc.collect()
            _, seconds, _, hit = engine_request(engine, f"t{repeat}-{name}", prompt, 1)
            assert hit == cached, f"expected a hit of {cached} tokens, got {hit}"
            hits[name] = hit
            if repeat:
                ttft[name].append(seconds)
    cold = ttft[names[0]]
    result: dict[str, Any] = {"prompt_tokens": prompt_tokens}
    for name in names:
        result[name] = {
            "hit_tokens": hits[name],
            "ttft_s": _summary(ttft[name]),
            "speedup_vs_cold": _summary([c / t for c, t in zip(cold, ttft[name], strict=True)]),
        }
    return result


# --- main ------------------------------------------------------------------------------------


def _config_fields(config: EngineConfig) -> dict[str, Any]:
    return {f: getattr(config, f) for f in config.__dataclass_fields__}


def _targets(result: dict[str, Any]) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    if "ttft" in result:
        ttft = result["ttft"]["cached_90pct"]["speedup_vs_cold"]
        targets["ttft_90pct_cached_at_least_4x_lower"] = {
            "median": ttft["median"],
            "min": ttft["min"],
            "met": ttft["median"] >= 4,
        }
    if "batch" in result:
        batch8 = result["batch"]["engine_batch_8"]["ratio_vs_hf"]
        targets["decode_batch_8_at_least_2x_hf"] = {
            "median": batch8["median"],
            "min": batch8["min"],
            "met": batch8["median"] >= 2,
        }
    return targets


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny-qwen3-next")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prefill-lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--ttft-prompt", type=int, default=2048)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--sequential-requests", type=int, default=8)
    parser.add_argument("--decode-prompt", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--block-tokens", type=int, default=16)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument(
        "--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="what to run"
    )
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load_before = os.getloadavg()
    loaded = build_preset(args.preset)
    config = EngineConfig(block_tokens=args.block_tokens, chunk_tokens=args.chunk_tokens)
    rng = random.Random(args.seed)
    timings: dict[str, float] = {}
    result: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        (
            "single_request",
            lambda: bench_single(
                loaded,
                config,
                rng,
                lengths=args.prefill_lengths,
                decode_tokens=args.decode_tokens,
                repeats=args.repeats,
            ),
        ),
        (
            "batch",
            lambda: bench_batch(
                loaded,
                config,
                rng,
                num_requests=args.requests,
                sequential_requests=args.sequential_requests,
                prompt_tokens=args.decode_prompt,
                decode_tokens=args.decode_tokens,
                repeats=args.repeats,
            ),
        ),
        (
            "ttft",
            lambda: bench_ttft(
                loaded, config, rng, prompt_tokens=args.ttft_prompt, repeats=args.repeats
            ),
        ),
    ]
    for name, step in steps:
        if name not in args.sections:
            continue
        begin = time.perf_counter()
        result[name] = step()
        timings[name] = time.perf_counter() - begin
    import transformers  # noqa: TID251  (version only; already imported by the engine)

    report = {
        "targets": _targets(result),
        "metrics": result,
        "config": {
            **{k: v for k, v in vars(args).items()},
            "engine": {k: str(v) for k, v in _config_fields(config).items()},
            "batch_sizes": list(BATCH_SIZES),
            "cached_fractions": list(CACHED_FRACTIONS),
        },
        "git_sha": git_sha(),
        "host": host()
        | {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
            "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg()),
        },
        "wall_s": {**timings, "total": time.perf_counter() - started},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
