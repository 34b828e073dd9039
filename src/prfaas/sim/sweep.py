"""A time-scale sweep of a trace replay: every policy at every scale, on the same arrivals per
scale, and where each policy saturates.

    rows = sweep_time_scales(body, base_dir, "x", [0.8, 0.65, 0.5], ["prfaas", "homogeneous"])
    saturation(rows)["homogeneous"]   # (largest completion rate seen, the scale it came at)

A trace's offered rate is its request count over the span of its (scaled) timestamps. The
saturation rate of a deployment is the largest completion rate it reaches over the sweep: below
it, throughput follows the offered rate; past it, throughput stops rising (on the Mooncake
trace it even falls: conversation turns arrive before their previous turn is prefilled, so
prefix reuse drops). Load factor rho = offered / saturation rate (docs/simulation.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prfaas.planner.parallel import ShapeSearch
from prfaas.planner.scenario import ArrivalsFile, ScenarioFile
from prfaas.sim.api import SimRun, scenario_arrivals, simulate_body
from prfaas.specs.errors import SpecError


@dataclass(frozen=True, slots=True)
class SweepRow:
    time_scale: float
    offered_per_s: float
    policy: str
    num_requests: int
    throughput_per_s: float
    goodput_per_s: float | None
    num_in_slo: int | None  # requests meeting the SLO (goodput x duration)
    ttft_mean_s: float | None
    ttft_p90_s: float | None
    ttft_p99_s: float | None
    prefix_hit_fraction: float

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def with_time_scale(body: ScenarioFile, time_scale: float) -> ScenarioFile:
    if body.arrivals is None or body.arrivals.process != "trace":
        raise SpecError("a time-scale sweep replays a trace: give --trace")
    arrivals: ArrivalsFile = body.arrivals.model_copy(update={"time_scale": time_scale})
    return body.model_copy(update={"arrivals": arrivals})


def _row(time_scale: float, offered: float, run: SimRun) -> SweepRow:
    s, report = run.report.summary, run.report
    in_slo = None
    if s.goodput_per_s is not None:
        in_slo = round(s.goodput_per_s * s.duration_s)
    return SweepRow(
        time_scale=time_scale,
        offered_per_s=offered,
        policy=report.policy,
        num_requests=s.num_requests,
        throughput_per_s=s.request_throughput_per_s,
        goodput_per_s=s.goodput_per_s,
        num_in_slo=in_slo,
        ttft_mean_s=s.ttft_s.mean,
        ttft_p90_s=s.ttft_s.p90,
        ttft_p99_s=s.ttft_s.p99,
        prefix_hit_fraction=report.prefix_hit_fraction,
    )


def sweep_time_scales(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    time_scales: Sequence[float],
    policies: list[str | None],
    *,
    progress: Callable[[str, float], None] | None = None,
    search: ShapeSearch | None = None,
) -> list[SweepRow]:
    """`search`: run each scale on the searched instance shapes (`sim.api.simulate_body`)."""
    rows = []
    for scale in time_scales:
        scaled = with_time_scale(body, scale)
        requests = scenario_arrivals(scaled, base_dir)
        span_s = requests[-1].arrival_s - requests[0].arrival_s if requests else 0.0
        offered = len(requests) / span_s if span_s > 0 else float("inf")
        for run in simulate_body(scaled, base_dir, where, policies, progress, search=search):
            rows.append(_row(scale, offered, run))
    return rows


def saturation(rows: Sequence[SweepRow]) -> dict[str, tuple[float, float]]:
    """Per policy: (largest completion rate over the sweep, the time scale it came at)."""
    best: dict[str, tuple[float, float]] = {}
    for row in rows:
        if row.policy not in best or row.throughput_per_s > best[row.policy][0]:
            best[row.policy] = (row.throughput_per_s, row.time_scale)
    return best


#: A policy saturated when, at some load tried, it completed this much less than was offered.
SATURATION_SHORTFALL = 0.1


def saturated(rows: Sequence[SweepRow], policy: str) -> bool:
    """Whether `policy` fell behind the offered rate at some load of the sweep; when it never
    did, its largest completion rate is only the highest load tried, not its saturation."""
    return any(
        r.policy == policy and r.throughput_per_s < (1 - SATURATION_SHORTFALL) * r.offered_per_s
        for r in rows
    )


def sweep_json(rows: Sequence[SweepRow]) -> dict[str, Any]:
    return {
        "schema": "prfaas.simulation-sweep/1",
        "rows": [r.to_json() for r in rows],
        "saturation": {
            p: {"throughput_per_s": rate, "time_scale": scale, "saturated": saturated(rows, p)}
            for p, (rate, scale) in saturation(rows).items()
        },
    }
