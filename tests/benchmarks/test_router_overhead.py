"""`benchmarks/router_overhead.py --quick` end to end against prfaas alone (the peers need
their own venv; `test_router_bench_parts` checks they are reported, not built, without it):
real processes on loopback, the JSON's shape, and values that make sense. No time is
asserted beyond order (p50 <= p90 <= p99) and positivity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

SYSTEMS = ("direct", "prfaas-pd-p", "prfaas-prfaas")
COUNTED = (1024, 102400)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("router-overhead") / "result.json"
    argv = [sys.executable, str(BENCHMARKS / "router_overhead.py"), "--quick", "--no-bootstrap",
            "--systems", ",".join(SYSTEMS), "--save", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(Path(out).read_text())
    assert json.loads(done.stdout) == result  # printed and saved alike
    return result


def _ordered(q: dict[str, float]) -> bool:
    return 0 < q["p50"] <= q["p90"] <= q["p99"]


def test_every_system_serves_every_request_of_the_latency_phase(report: dict[str, Any]) -> None:
    assert report["benchmark"] == "router_overhead"
    assert len(report["loadavg_before_after"]) == 2
    assert set(report["systems"]) == set(SYSTEMS)
    for name in SYSTEMS:
        row = report["systems"][name]["by_prompt_tokens"]["1024"]
        latency, throughput = row["latency"], row["throughput"]
        assert latency["ok"] == report["config"]["latency_requests"], (name, latency)
        assert latency["by_status"] == {"200": latency["ok"]}
        assert _ordered(latency["ttft_ms"]) and _ordered(latency["e2e_ms"])
        assert latency["ttft_ms"]["p50"] <= latency["e2e_ms"]["p50"]
        assert throughput["ok"] > 0 and throughput["requests_per_s"] > 0
        assert throughput["backend_core_fraction"] > 0
        has_router = name != "direct"
        assert (throughput["requests_per_router_core_s"] is not None) == has_router


def test_each_prfaas_system_took_its_path(report: dict[str, Any]) -> None:
    """Most of each system's requests took its path (the scheduler may still divert a few
    when a queue builds on a loaded host: the decisions are reported, not forced)."""
    for name, path in (("prfaas-pd-p", "pd-p"), ("prfaas-prfaas", "prfaas")):
        decisions = report["systems"][name]["routing_decisions"]
        assert decisions.get(path, 0) > sum(decisions.values()) / 2, (name, decisions)


def test_the_summary_subtracts_direct(report: dict[str, Any]) -> None:
    summary = report["summary"]["1024"]
    assert set(summary) == {"prfaas-pd-p", "prfaas-prfaas"}
    for name, row in summary.items():
        direct = report["systems"]["direct"]["by_prompt_tokens"]["1024"]["latency"]["ttft_ms"]
        mine = report["systems"][name]["by_prompt_tokens"]["1024"]["latency"]["ttft_ms"]
        assert row["added_ttft_ms"]["p50"] == pytest.approx(mine["p50"] - direct["p50"], abs=1e-3)
        assert row["per_core_vs_fastest_peer"] is None  # no peer ran


def test_round_trips_carry_the_prompt_to_the_instances(report: dict[str, Any]) -> None:
    for path in ("prfaas-pd-p", "prfaas-prfaas"):
        rows = report["round_trips"][path]
        assert set(rows) == {str(n) for n in COUNTED}
        for n in COUNTED:
            row = rows[str(n)]
            assert 1 <= row["sequential_round_trips"] <= row["calls"] == len(row["each"])
            assert row["bytes_to_instances"] >= n  # the prompt reached an instance at least once
            assert any("/decode" in c["call"] for c in row["each"])
        small, large = rows[str(COUNTED[0])], rows[str(COUNTED[1])]
        assert large["bytes_to_instances"] > small["bytes_to_instances"]
