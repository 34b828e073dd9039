"""Burst acceptance on the case-study deployment: with the work-conserving rule PrfaaS-PD's
TTFT mean and P90 are no worse than homogeneous PD's and Dynamo-style's (docs/simulation.md)."""

from __future__ import annotations

import math

import pytest

from prfaas.kvcache.ids import RequestId
from prfaas.planner.scenario import (
    AdmissionFile,
    SimulationFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.config import build_run_config
from prfaas.sim.report import build_report
from prfaas.sim.runner import Simulator

BURSTS = {
    "300x3K": [SimRequest(RequestId(f"b{i}"), 0.0, 3072, 1024) for i in range(300)],
    "mixed": [
        SimRequest(RequestId(f"m{i}"), 0.0, 40_000 if i % 5 == 0 else 3072, 256) for i in range(400)
    ],
}


def _ttft(policy: str, requests: list[SimRequest]) -> tuple[float, float]:
    body, base = read_scenario_file("paper-case-study")
    off = SimulationFile(admission=AdmissionFile(mode="off"))  # bursts as routed, none refused
    body = body.model_copy(update={"simulation": off})
    config = build_run_config(build_scenario(body, base, "x"), body, base, policy)
    ttft = build_report(config, Simulator(config, requests).run(), None).summary.ttft_s
    assert ttft.mean is not None and ttft.p90 is not None
    return ttft.mean, ttft.p90


@pytest.mark.parametrize("shape", sorted(BURSTS))
def test_prfaas_no_worse_than_homogeneous_and_dynamo(shape: str) -> None:
    mean, p90 = _ttft("prfaas", BURSTS[shape])
    for other in ("homogeneous", "dynamo"):
        other_mean, other_p90 = _ttft(other, BURSTS[shape])
        assert mean <= other_mean
        assert p90 <= other_p90 or math.isclose(p90, other_p90, rel_tol=1e-9)
