"""The damped slow loop never keeps fewer requests in SLO than the loop off (issue 27), on
three trace shapes past the planned rate: a diurnal ramp and a prefix-heavy mix (generated,
always run) and a slice of the Mooncake conversation trace (../shared/traces, skipped when
absent). Simulations are deterministic: this compares two counts, not timings."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.planner.scenario import RebalanceFile, read_scenario_file
from prfaas.sim.api import simulate_body, with_trace
from prfaas.workload.diurnal import DiurnalSpec, diurnal_trace
from prfaas.workload.prefix_heavy import PrefixHeavySpec, prefix_heavy_trace, write_mooncake_trace

CONVERSATION = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "traces"
    / "mooncake_conversation_trace.jsonl"
)
NUM_REQUESTS = 4000
PERIOD_S = 120.0  # the default period (RebalanceFile)


def _in_slo(trace: Path, time_scale: float, loop_on: bool) -> int:
    body, base_dir = read_scenario_file("paper-case-study-mooncake")  # TTFT 10 s, TPOT 25 ms
    body = with_trace(body, trace)
    assert body.arrivals is not None and body.simulation is not None
    arrivals = body.arrivals.model_copy(update={"time_scale": time_scale})
    rebalance = RebalanceFile(period_s=PERIOD_S) if loop_on else None
    simulation = body.simulation.model_copy(update={"rebalance": rebalance})
    body = body.model_copy(update={"arrivals": arrivals, "simulation": simulation})
    summary = simulate_body(body, base_dir, trace.name, ["prfaas"])[0].report.summary
    assert summary.goodput_per_s is not None
    return round(summary.goodput_per_s * summary.duration_s)


def _generated(tmp_path: Path, shape: str) -> Path:
    path = tmp_path / f"{shape}.jsonl"
    if shape == "diurnal":
        write_mooncake_trace(diurnal_trace(DiurnalSpec(num_requests=NUM_REQUESTS, seed=1)), path)
    else:
        spec = PrefixHeavySpec(num_requests=NUM_REQUESTS, seed=1)
        write_mooncake_trace(prefix_heavy_trace(spec), path)
    return path


@pytest.mark.parametrize(
    ("shape", "time_scale"),
    # diurnal x0.9: a planner-only flip toward an idle decode stage and t following the
    # trough's shorter prompts down cost 26 requests before the loop held while nothing is busy
    [("diurnal", 0.6), ("diurnal", 0.9), ("prefix-heavy", 0.25)],
)
def test_the_loop_keeps_no_fewer_in_slo_on_generated_shapes(
    tmp_path: Path, shape: str, time_scale: float
) -> None:
    trace = _generated(tmp_path, shape)
    assert _in_slo(trace, time_scale, loop_on=True) >= _in_slo(trace, time_scale, loop_on=False)


def test_the_loop_keeps_no_fewer_in_slo_on_the_conversation_trace(tmp_path: Path) -> None:
    if not CONVERSATION.exists():
        pytest.skip(f"shared trace not present at {CONVERSATION}")
    lines = CONVERSATION.read_text().splitlines()[:NUM_REQUESTS]
    trace = tmp_path / "conversation-slice.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    assert _in_slo(trace, 0.3, loop_on=True) >= _in_slo(trace, 0.3, loop_on=False)
