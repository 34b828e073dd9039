"""The simulator keeps instance views between decisions; a role flip must clear them."""

from __future__ import annotations

from pathlib import Path

from sim_fixtures import write_scenario

from prfaas.planner.scenario import read_scenario_file
from prfaas.scheduler import Role
from prfaas.sim.api import build_scenario, scenario_arrivals
from prfaas.sim.cluster import cluster_view
from prfaas.sim.config import build_run_config
from prfaas.sim.runner import Simulator


def test_flip_clears_the_cached_views(tmp_path: Path) -> None:
    body, base = read_scenario_file(str(write_scenario(tmp_path)))
    config = build_run_config(build_scenario(body, base, "x"), body, base, "prfaas")
    sim = Simulator(config, scenario_arrivals(body, base)[:1])
    before = cluster_view(sim)
    assert cluster_view(sim).instances is before.instances  # reused while nothing changes
    decode = before.accepting(Role.PD_DECODE)[0]
    sim.by_id[decode.instance_id].begin_flip(Role.PD_PREFILL)  # idle: switches at once
    after = cluster_view(sim)
    assert decode.instance_id in [i.instance_id for i in after.accepting(Role.PD_PREFILL)]
    assert decode.instance_id not in [i.instance_id for i in after.accepting(Role.PD_DECODE)]
