"""A generated prefix-heavy workload in Mooncake trace format (docs/simulation.md, SLO capacity).

Agentic and chat traffic behind a few long system prompts: most of each prompt was seen before.
The generator draws

- `num_shared_prefixes` shared prefixes (system prompts, tool schemas, documents) of
  lognormal length around `shared_prefix_blocks` blocks, picked per session with Zipf
  popularity (exponent `zipf_s`);
- sessions arriving as a Poisson process; a session has a geometric number of turns (mean
  `mean_turns`), each turn `think_s` (exponential) after the previous one, and each turn
  appends lognormal new blocks around `new_blocks_per_turn` to the session's context;
- outputs lognormal around `mean_output_tokens` (short, as agent steps and chat replies are).

Block ids are chained as in Mooncake traces: a shared prefix owns its ids, a session's own
blocks get fresh ids, so an equal id at a position means an equal prefix. With the defaults
about 64% of blocks are reusable with an unbounded cache (`reusable_block_fraction`), against
the conversation trace's 36.6%, and outputs average ~150 tokens.

    trace = prefix_heavy_trace(PrefixHeavySpec(seed=1))
    write_mooncake_trace(trace, Path("prefix-heavy.jsonl"))   # or: python -m this module
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True, slots=True)
class PrefixHeavySpec:
    num_requests: int = 8000
    rate_per_s: float = 3.0  # requests per second (turns of all sessions together)
    num_shared_prefixes: int = 400
    shared_prefix_blocks: float = 9.0
    zipf_s: float = 1.1
    mean_turns: float = 2.2
    think_s: float = 40.0
    new_blocks_per_turn: float = 12.0
    mean_output_tokens: float = 150.0
    max_input_blocks: int = 240  # 120K tokens: the case study's context
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_requests < 1 or self.rate_per_s <= 0 or self.mean_turns < 1:
            raise ValueError("need num_requests >= 1, rate_per_s > 0 and mean_turns >= 1")


def _lognormal_int(rng: np.random.Generator, mean: float, sigma: float, low: int) -> int:
    mu = math.log(mean) - sigma**2 / 2  # so that the mean is `mean`
    return max(low, round(float(rng.lognormal(mu, sigma))))


def prefix_heavy_trace(spec: PrefixHeavySpec) -> tuple[TraceRequest, ...]:
    """The workload's requests in arrival order (timestamps in ms, as Mooncake writes them)."""
    rng = np.random.default_rng(spec.seed)
    next_id = 0
    prefixes: list[list[int]] = []
    for _ in range(spec.num_shared_prefixes):
        size = _lognormal_int(rng, spec.shared_prefix_blocks, 0.5, 1)
        prefixes.append(list(range(next_id, next_id + size)))
        next_id += size
    ranks = np.arange(1, spec.num_shared_prefixes + 1, dtype=np.float64)
    popularity = ranks**-spec.zipf_s
    popularity /= popularity.sum()
    session_rate = spec.rate_per_s / spec.mean_turns
    requests: list[TraceRequest] = []
    start_s = 0.0
    while len(requests) < spec.num_requests * 1.5:  # sessions overlap: cut at num_requests
        start_s += float(rng.exponential(1.0 / session_rate))
        context = list(prefixes[int(rng.choice(spec.num_shared_prefixes, p=popularity))])
        turns = int(rng.geometric(1.0 / spec.mean_turns))
        at_s = start_s
        for _ in range(turns):
            grow = _lognormal_int(rng, spec.new_blocks_per_turn, 0.6, 1)
            context = context + list(range(next_id, next_id + grow))
            next_id += grow
            if len(context) > spec.max_input_blocks:
                break
            partial = int(rng.integers(0, MOONCAKE_BLOCK_TOKENS))
            requests.append(
                TraceRequest(
                    timestamp_ms=round(at_s * 1000.0, 3),
                    input_tokens=len(context) * MOONCAKE_BLOCK_TOKENS - partial,
                    output_tokens=_lognormal_int(rng, spec.mean_output_tokens, 0.7, 1),
                    hash_ids=tuple(context),
                )
            )
            at_s += float(rng.exponential(spec.think_s))
    requests.sort(key=lambda r: r.timestamp_ms)
    return tuple(requests[: spec.num_requests])


def reusable_block_fraction(trace: tuple[TraceRequest, ...]) -> float:
    """Share of all blocks whose prefix appeared before (an unbounded cache's block hits)."""
    seen: set[tuple[int, int]] = set()
    hits = total = 0
    for request in trace:
        for position, block in enumerate(request.hash_ids):
            key = (position, block)
            hits += key in seen
            seen.add(key)
        total += len(request.hash_ids)
    return hits / max(1, total)


def write_mooncake_trace(trace: tuple[TraceRequest, ...], path: Path) -> None:
    lines = (
        json.dumps(
            {
                "timestamp": r.timestamp_ms,
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
                "hash_ids": list(r.hash_ids),
            }
        )
        for r in trace
    )
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    out = Path(sys.argv[1] if len(sys.argv) > 1 else "prefix-heavy.jsonl")
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    generated = prefix_heavy_trace(PrefixHeavySpec(seed=seed))
    write_mooncake_trace(generated, out)
    inputs = [r.input_tokens for r in generated]
    outputs = [r.output_tokens for r in generated]
    span_s = generated[-1].timestamp_ms / 1000.0
    print(
        f"wrote {out}: {len(generated)} requests over {span_s:.0f} s, mean input "
        f"{np.mean(inputs):.0f}, mean output {np.mean(outputs):.0f}, reusable blocks "
        f"{reusable_block_fraction(generated):.1%}"
    )
