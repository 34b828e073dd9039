"""The simulator's disk tier: a prefix evicted from DRAM is loaded back when that is worth it.

prfaas-1t pages are 8.4 MiB (an MLA block: 1 page, a KDA snapshot: 23). A computes a 20-block
prefix (20 blocks + its end snapshot stay cached, 43 pages); B, another 20 blocks, needs 66
pages of an 82-page pool, so A's snapshot and deepest blocks are evicted. C repeats A's prefix:
without a disk tier its state is gone and it hits nothing; with one it hits the whole prefix,
read back from disk; with a disk so slow that the load costs more than the recompute, the
instance (and the router) value the hit at its DRAM part, which has no state: no hit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_fixtures import write_scenario

from prfaas.planner.scenario import read_scenario_file
from prfaas.sim.api import build_scenario
from prfaas.sim.arrivals import trace_arrivals
from prfaas.sim.config import build_run_config
from prfaas.sim.runner import Simulator
from prfaas.workload.trace import read_mooncake_trace

BLOCKS = 20


def run(tmp_path: Path, disk_gib: float, read_gib_per_s: float = 2.0) -> list[int]:
    a, b = list(range(BLOCKS)), list(range(1000, 1000 + BLOCKS))
    rows = [(0, a), (60_000, b), (120_000, a)]
    lines = [
        {"timestamp": t, "input_length": len(ids) * 512, "output_length": 8, "hash_ids": ids}
        for t, ids in rows
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    path = write_scenario(
        tmp_path,
        workload={"trace": {"path": trace.name, "cache_capacity_blocks": None}},
        arrivals={"process": "trace", "time_scale": 1.0},
        simulation={
            "prefix_cache_gib": 82 * 8.4375 / 1024,
            "prefix_cache_disk_gib": disk_gib,
            "disk_read_gib_per_s": read_gib_per_s,
            "deployment": {"n_prfaas": 1, "n_p": 1, "n_d": 1, "threshold_tokens": 100_000},
        },
    )
    body, base = read_scenario_file(str(path))
    config = build_run_config(build_scenario(body, base, "x"), body, base, "prfaas")
    sim = Simulator(config, trace_arrivals(read_mooncake_trace(trace), 1.0, None))
    return [r.cached_tokens for r in sim.run().records]


@pytest.mark.parametrize(
    ("disk_gib", "read_gib_per_s", "c_hit"),
    [(0.0, 2.0, 0), (1.0, 2.0, BLOCKS * 512 - 1), (1.0, 1e-6, 0)],  # a hit keeps 1 token
)
def test_a_prefix_evicted_from_dram_is_loaded_back_when_worth_it(
    tmp_path: Path, disk_gib: float, read_gib_per_s: float, c_hit: int
) -> None:
    assert run(tmp_path, disk_gib, read_gib_per_s) == [0, 0, c_hit]
