"""SLO capacity: the largest offered rate at which >= 99% of requests meet the SLO, per policy,
and a load sweep around it (docs/simulation.md, SLO capacity).

    result = slo_capacity(body, base_dir, "x", "prfaas")     # CapacityResult
    rows = capacity_sweep(body, base_dir, "x", result, load_factors=[0.5, 1, 2], policies=ps)

The load knob is a time scale s on the arrivals: a trace's inter-arrival gaps are multiplied by
s, a synthetic process's rate is divided by s, so the offered rate (requests over the span of
their arrival times) goes as 1/s. The search:

1. Probe s = `start_scale` (1: the scenario as written).
2. Bracket: if the probe meets the target, halve s (double the load) until a probe misses it;
   if it misses, double s until one meets it, at most `MAX_LOAD_HALVINGS` times (a deployment
   that misses at 1/8 of the start load has a floor of misses that load does not explain: no
   capacity). At most `max_probes` probes in all.
3. Bisect in log s between the largest-load probe that met the target and the smallest-load
   probe that missed, until they are within `rel_tol` (2%) of each other.

The capacity is the offered rate of the best probe that met the target. The search assumes
the in-SLO fraction falls as load rises (it does up to simulation noise; every probe is kept
in `probes`, so a non-monotone curve shows). A request refused by admission control counts as
not meeting the SLO, as a failure does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prfaas.planner.scenario import ArrivalsFile, ScenarioFile
from prfaas.sim.api import SimRun, scenario_arrivals, simulate_body
from prfaas.specs.errors import SpecError

#: Share of requests that must meet the SLO (the issue's definition of SLO capacity).
SLO_TARGET = 0.99
#: How many times the search halves the load looking for a probe that meets the target.
MAX_LOAD_HALVINGS = 3


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One policy at one load: what the SLO capacity and the sweep report."""

    policy: str
    time_scale: float
    offered_per_s: float
    num_requests: int
    num_in_slo: int
    num_rejected: int
    goodput_per_s: float
    throughput_per_s: float
    ttft_p90_s: float | None
    load_factor: float | None = None  # offered / the reference capacity (sweep rows)

    @property
    def slo_fraction(self) -> float:
        return self.num_in_slo / max(1, self.num_requests)

    @property
    def rejection_rate(self) -> float:
        return self.num_rejected / max(1, self.num_requests)

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        out["slo_fraction"] = self.slo_fraction
        out["rejection_rate"] = self.rejection_rate
        return out


@dataclass(frozen=True, slots=True)
class CapacityResult:
    policy: str
    capacity_per_s: float | None  # None: no probe met the target
    time_scale: float | None
    probes: list[LoadPoint] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "capacity_per_s": self.capacity_per_s,
            "time_scale": self.time_scale,
            "probes": [p.to_json() for p in self.probes],
        }


def with_load_scale(body: ScenarioFile, scale: float) -> ScenarioFile:
    """`body` with its arrivals stretched by `scale` (trace gaps x s, synthetic rate / s)."""
    arrivals = body.arrivals or ArrivalsFile()
    if arrivals.process == "trace":
        update: dict[str, float] = {"time_scale": arrivals.time_scale * scale}
    elif arrivals.rate_per_s is not None:
        update = {"rate_per_s": arrivals.rate_per_s / scale}
    else:
        raise SpecError("SLO capacity needs arrivals with a rate (or a trace to replay)")
    return body.model_copy(update={"arrivals": arrivals.model_copy(update=update)})


def offered_rate(body: ScenarioFile, base_dir: Path) -> float:
    requests = scenario_arrivals(body, base_dir)
    span_s = requests[-1].arrival_s - requests[0].arrival_s if len(requests) > 1 else 0.0
    return len(requests) / span_s if span_s > 0 else float("inf")


def _point(run: SimRun, scale: float, offered: float) -> LoadPoint:
    s = run.report.summary
    in_slo = round((s.goodput_per_s or 0.0) * s.duration_s)
    return LoadPoint(
        policy=run.report.policy,
        time_scale=scale,
        offered_per_s=offered,
        num_requests=s.num_requests,
        num_in_slo=in_slo,
        num_rejected=s.num_rejected,
        goodput_per_s=s.goodput_per_s or 0.0,
        throughput_per_s=s.request_throughput_per_s,
        ttft_p90_s=s.ttft_s.p90,
    )


def run_at(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    scale: float,
    policies: Sequence[str | None],
    *,
    progress: Callable[[str, float], None] | None = None,
) -> list[LoadPoint]:
    scaled = with_load_scale(body, scale)
    if scaled.simulation is None or scaled.simulation.slo.ttft_s is None:
        raise SpecError("SLO capacity needs an SLO (simulation.slo) to count requests against")
    offered = offered_rate(scaled, base_dir)
    runs = simulate_body(scaled, base_dir, where, list(policies), progress)
    return [_point(run, scale, offered) for run in runs]


def search_scale(
    meets: Callable[[float], bool], start_scale: float, rel_tol: float, max_probes: int
) -> tuple[float | None, float | None]:
    """(smallest scale that met, largest that missed) after bracketing by factors of 2 and
    bisecting in log scale until they are within `rel_tol`; at most `max_probes` calls."""
    meet: float | None = None
    miss: float | None = None
    scale, num_probes = start_scale, 0
    while num_probes < max_probes and (meet is None or miss is None):
        if meet is None and scale > start_scale * 2**MAX_LOAD_HALVINGS:
            break  # misses even at a tiny load: a floor of misses load does not explain
        num_probes += 1
        if meets(scale):
            meet, scale = scale, scale / 2
        else:
            miss, scale = scale, scale * 2
    while meet is not None and miss is not None and num_probes < max_probes:
        if meet / miss - 1 <= rel_tol:
            break
        mid = math.sqrt(meet * miss)
        num_probes += 1
        if meets(mid):
            meet = mid
        else:
            miss = mid
    return meet, miss


def slo_capacity(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    policy: str,
    *,
    start_scale: float = 1.0,
    rel_tol: float = 0.02,
    max_probes: int = 14,
    progress: Callable[[str, float], None] | None = None,
) -> CapacityResult:
    """Bracket, then bisect on the time scale (module docstring)."""
    probes: list[LoadPoint] = []

    def meets(scale: float) -> bool:
        point = run_at(body, base_dir, where, scale, [policy], progress=progress)[0]
        probes.append(point)
        return point.slo_fraction >= SLO_TARGET

    search_scale(meets, start_scale, rel_tol, max_probes)
    best = [p for p in probes if p.slo_fraction >= SLO_TARGET]
    if not best:
        return CapacityResult(policy, None, None, probes)
    top = max(best, key=lambda p: p.offered_per_s)
    return CapacityResult(policy, top.offered_per_s, top.time_scale, probes)


def capacity_sweep(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    reference: CapacityResult,
    *,
    load_factors: Sequence[float],
    policies: Sequence[str | None],
    progress: Callable[[str, float], None] | None = None,
) -> list[LoadPoint]:
    """Every policy at each load factor x the reference policy's SLO capacity."""
    if reference.time_scale is None or reference.capacity_per_s is None:
        raise SpecError(f"{reference.policy} met the SLO target at no probed load")
    rows = []
    for factor in load_factors:
        scale = reference.time_scale / factor
        for point in run_at(body, base_dir, where, scale, policies, progress=progress):
            rows.append(
                LoadPoint(
                    **{n: getattr(point, n) for n in LoadPoint.__slots__ if n != "load_factor"},
                    load_factor=point.offered_per_s / reference.capacity_per_s,
                )
            )
    return rows


def capacity_json(results: Sequence[CapacityResult], rows: Sequence[LoadPoint]) -> dict[str, Any]:
    return {
        "schema": "prfaas.slo-capacity/1",
        "slo_target": SLO_TARGET,
        "capacity": [r.to_json() for r in results],
        "sweep": [r.to_json() for r in rows],
    }
