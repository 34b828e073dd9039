"""Every routing policy runs live, chosen by `policy:` in the deployment file, and decides as the
simulator does on the same trace slice (issue 25, point 5).

One short slice (Mooncake format: lengths around t, no shared prefix) goes through the live
router of an emulated deployment (real processes on loopback) and through the simulator with
the same layout (1 PrfaaS h200, 1 PD-P h20, 1 PD-D h20), t and link; both build their scheduler
with `scheduler.assemble`. The path chosen for each request must be the same.

Differences allowed, and why none shows here: the rules that read load or the link (PrfaaS's
congestion gate, queue-surge gate and burst rule, Dynamo's busy check, admission's prediction,
the scarce / plentiful mode) and prefix hits (the router learns them from polled cache events)
depend on timing, which differs between wall time and simulated time. The slice is sent one
request at a time (the simulator's arrivals are 1,000 s apart: each ends before the next), has
no shared prefix and moves little KV over a fast link, so none of these rules fires on either
side, and every decision is the policy's length rule. Reasons are compared too, except
PrfaaS's plentiful ones: the emulated backend cannot move cached prefixes (`can_move_cache`
False live, True in the simulator), which renames them (`plentiful-no-move-*`) without
changing the path when nothing is cached.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from serve_helpers import emulated_deployment, running

from prfaas.planner.scenario import build_scenario, read_scenario_file
from prfaas.scheduler import POLICIES, ClusterView, Decision, RouteDecision, RouteRequest
from prfaas.serve.config.deployment import LinkShaping, LinkSpec
from prfaas.serve.launch.launcher import Launcher
from prfaas.sim.api import scenario_arrivals
from prfaas.sim.config import build_run_config
from prfaas.sim.runner import Simulator

THRESHOLD_TOKENS = 128
LINK_GBPS = 100.0
OUTPUT_TOKENS = 4
#: Input lengths around t = 128, both sides of it and on it (the rule is "longer than t").
LENGTHS = (40, 127, 128, 129, 300, 96, 700, 16, 200, 1000, 64, 160)


def _write_slice(where: Path) -> Path:
    """The trace slice: one request every 1,000 s, each prefix its own (no shared block)."""
    lines = []
    for i, length in enumerate(LENGTHS):
        blocks = -(-length // 16)
        lines.append(
            {
                "timestamp": i * 1_000_000,
                "input_length": length,
                "output_length": OUTPUT_TOKENS,
                "hash_ids": [i * 1000 + k for k in range(blocks)],
            }
        )
    path = where / "slice.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def simulated(policy: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(path, reason) of each request of the slice, in arrival order, from the simulator."""
    body = {
        "name": "policy-slice",
        "model": "prfaas-1t",
        "prfaas": {"chip": "h200", "num_gpus": 8, "gpus_per_instance": 8},
        "pd": {"chip": "h20", "num_gpus": 16, "gpus_per_instance": 8},
        "link_gbps": LINK_GBPS,
        "decode": {"slo_tokens_per_s": 20},
        "threshold_step_tokens": 16,
        "workload": {
            "trace": {
                "path": _write_slice(where).name,
                "block_tokens": 16,
                "cache_capacity_blocks": None,
            }
        },
        "arrivals": {"process": "trace"},
        "simulation": {
            "policy": policy,
            "deployment": {
                "n_prfaas": 1,
                "n_p": 1,
                "n_d": 1,
                "threshold_tokens": THRESHOLD_TOKENS,
            },
        },
    }
    path = where / "scenario.yaml"
    path.write_text(yaml.safe_dump(body))
    scenario_body, base_dir = read_scenario_file(str(path))
    scenario = build_scenario(scenario_body, base_dir, path.name)
    config = build_run_config(scenario, scenario_body, base_dir, policy)
    simulator = Simulator(config, scenario_arrivals(scenario_body, base_dir))
    decisions: list[Decision] = []
    route = simulator.scheduler.route

    def recorded(request: RouteRequest, view: ClusterView, waited_s: float = 0.0) -> Decision:
        decisions.append(route(request, view, waited_s))
        return decisions[-1]

    monkeypatch.setattr(simulator.scheduler, "route", recorded)
    result = simulator.run()
    assert all(r.error is None for r in result.records)  # every request served
    assert all(isinstance(d, RouteDecision) for d in decisions)
    return [(d.path.value, d.reason.value) for d in decisions if isinstance(d, RouteDecision)]


@pytest.fixture(params=sorted(POLICIES))
def live(request: pytest.FixtureRequest) -> Iterator[tuple[str, Launcher]]:
    deployment = emulated_deployment(
        time_factor=0.001,
        policy=request.param,
        threshold_tokens=THRESHOLD_TOKENS,
        link=LinkSpec(rate_gbps=LINK_GBPS, shaping=LinkShaping.TOKEN_BUCKET),
    )
    with running(deployment, timeout_s=60) as launcher:
        yield request.param, launcher


def replayed(launcher: Launcher) -> list[tuple[str, str]]:
    """(path, reason) of each request of the slice sent to the live router one at a time."""
    rng = random.Random(25)
    with httpx.Client(base_url=launcher.url, timeout=60) as client:
        for length in LENGTHS:
            prompt = [rng.randrange(1, 250) for _ in range(length)]
            body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": OUTPUT_TOKENS}
            response = client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
        state = client.get("/admin/state", headers=launcher.admin_headers).json()
    records = state["recent_decisions"][-len(LENGTHS) :]
    assert [r["input_tokens"] for r in records] == list(LENGTHS)
    assert all(r["status"] == "completed" for r in records)
    return [(r["path"], r["reason"]) for r in records]


def _comparable(reason: str) -> str:
    return reason.replace("plentiful-no-move-", "plentiful-")


@pytest.mark.e2e
def test_each_policy_decides_live_as_in_the_simulator(
    live: tuple[str, Launcher], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy, launcher = live
    expected = simulated(policy, tmp_path, monkeypatch)
    got = replayed(launcher)
    assert [path for path, _ in got] == [path for path, _ in expected]
    assert [_comparable(r) for _, r in got] == [r for _, r in expected]
    paths = {path for path, _ in got}
    assert paths == {"homogeneous": {"pd-p"}, "naive": {"prfaas"}}.get(policy, {"pd-p", "prfaas"})
