"""The generated prefix-heavy workload: reuse, short outputs, chained ids, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prfaas.workload.prefix_heavy import (
    PrefixHeavySpec,
    prefix_heavy_trace,
    reusable_block_fraction,
    write_mooncake_trace,
)
from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, read_mooncake_trace


def test_defaults_are_prefix_heavy_with_short_outputs() -> None:
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=3000, seed=1))
    assert len(trace) == 3000
    assert reusable_block_fraction(trace) >= 0.6
    assert 120 <= np.mean([r.output_tokens for r in trace]) <= 180
    assert all(r.input_tokens <= len(r.hash_ids) * MOONCAKE_BLOCK_TOKENS for r in trace)
    times = [r.timestamp_ms for r in trace]
    assert times == sorted(times)


def test_ids_are_chained_prefixes() -> None:
    """An id at a position determines the whole prefix before it (Mooncake semantics)."""
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=1500, seed=2))
    before: dict[tuple[int, int], tuple[int, ...]] = {}
    for request in trace:
        for position, block in enumerate(request.hash_ids):
            prefix = request.hash_ids[:position]
            assert before.setdefault((position, block), prefix) == prefix


def test_seeded_and_round_trips_through_the_trace_reader(tmp_path: Path) -> None:
    spec = PrefixHeavySpec(num_requests=200, seed=5)
    trace = prefix_heavy_trace(spec)
    assert trace == prefix_heavy_trace(spec)
    path = tmp_path / "t.jsonl"
    write_mooncake_trace(trace, path)
    assert read_mooncake_trace(path) == trace
