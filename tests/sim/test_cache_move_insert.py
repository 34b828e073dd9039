"""Cross-cluster cache moves write the moved prefix into the target instance's pool.

A prompt computed at PrfaaS (A) leaves its blocks and end-of-prompt state there. B extends it by
one block: plentiful bandwidth, so B goes to PD-P and moves A's prefix across. C shares that
prefix with a different last block: it must now hit on the PD-P instance that received the move
(blocks *and* the state snapshot at the moved boundary), so no second move crosses the link.
"""

from __future__ import annotations

import json
from pathlib import Path

from sim_fixtures import write_scenario

from prfaas.planner.scenario import ScenarioFile, read_scenario_file
from prfaas.scheduler import RouteDecision
from prfaas.sim.api import build_scenario, simulate_body
from prfaas.sim.arrivals import trace_arrivals
from prfaas.sim.config import build_run_config
from prfaas.sim.runner import Simulator
from prfaas.workload.trace import read_mooncake_trace

PREFIX_BLOCKS = 40  # 20,480 tokens: longer than t = 8K, so A is offloaded


def _trace(tmp: Path) -> Path:
    prefix = list(range(PREFIX_BLOCKS))
    rows = [
        (0, prefix),  # A: cold, long -> PrfaaS, which then holds the prefix and its state
        (60_000, [*prefix, 2000]),  # B: 1 uncached block -> PD-P, moving A's prefix
        (120_000, [*prefix, 3000]),  # C: the moved prefix is at PD-P now
    ]
    lines = [
        {"timestamp": t, "input_length": len(ids) * 512, "output_length": 8, "hash_ids": ids}
        for t, ids in rows
    ]
    path = tmp / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def _scenario(tmp_path: Path) -> tuple[Path, ScenarioFile, Path]:
    """One PrfaaS, one PD-P, one PD-D; t = 8192: the trace's first request goes to PrfaaS."""
    trace = _trace(tmp_path)
    path = write_scenario(
        tmp_path,
        workload={"trace": {"path": trace.name, "cache_capacity_blocks": None}},
        arrivals={"process": "trace", "time_scale": 1.0},
        simulation={
            "prefix_cache_gib": 512,
            "deployment": {"n_prfaas": 1, "n_p": 1, "n_d": 1, "threshold_tokens": 8192},
        },
    )
    body, base = read_scenario_file(str(path))
    return trace, body, base


def test_moved_prefix_lands_in_the_target_pool(tmp_path: Path) -> None:
    trace, body, base = _scenario(tmp_path)
    config = build_run_config(build_scenario(body, base, "x"), body, base, "prfaas")
    requests = trace_arrivals(read_mooncake_trace(trace), 1.0, None)
    sim = Simulator(config, requests)
    decisions: list[RouteDecision] = []
    route = sim.scheduler.route

    def record(*args: object, **kwargs: object) -> object:
        decision = route(*args, **kwargs)  # type: ignore[arg-type]
        assert isinstance(decision, RouteDecision)
        decisions.append(decision)
        return decision

    sim.scheduler.route = record  # type: ignore[method-assign]
    result = sim.run()
    a, b, c = decisions
    prefix_tokens = PREFIX_BLOCKS * 512
    assert (a.path, a.reused_prefix_tokens, a.cache_move) == ("prfaas", 0, None)
    assert b.path == "pd-p" and b.cache_move is not None
    assert b.cache_move.tokens == prefix_tokens
    # C restores the prefix on the instance that received it, with nothing crossing again.
    assert (c.path, c.prefill_instance_id, c.cache_move) == ("pd-p", b.prefill_instance_id, None)
    assert c.reused_prefix_tokens == prefix_tokens
    assert sim.moved_blocks == PREFIX_BLOCKS
    assert [r.cached_tokens for r in result.records] == [0, prefix_tokens, prefix_tokens]
    assert result.records[1].path == "pd-p"
    assert sim.index is not None and sim.hash_scheme is not None
    prefix = sim.hash_scheme.hash_external(list(range(PREFIX_BLOCKS)))
    assert sim.index.match_instance(b.prefill_instance_id, prefix) == PREFIX_BLOCKS


def test_compare_still_runs_with_moves(tmp_path: Path) -> None:
    _, body, base = _scenario(tmp_path)
    runs = simulate_body(body, base, "x", ["prfaas", "dynamo"])
    assert [r.report.summary.num_completed for r in runs] == [3, 3]
