"""Saturation throughput with its noise (issue 27): repeated seeds, a value with an interval.

One sweep's saturation is the largest completion rate over the loads tried: the maximum of
noisy samples, biased high and with no error bar (9.65 req/s at one load, 9.36-9.47 beside it).
Here each seed draws its own Poisson arrivals; per seed the saturation is the largest
completion rate over `LOAD_FACTORS` x the planned Lambda_max, every request admitted
(admission off: a refused request is not throughput); the estimate is their mean with a 95%
Student-t interval, mean +- t(0.975, n - 1) x s / sqrt(n).

    estimate = seeded_saturation(body, base_dir, "x", "prfaas", seeds=range(5))
    estimate.value_per_s, estimate.low_per_s, estimate.high_per_s
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prfaas.planner.scenario import (
    AdmissionFile,
    ArrivalsFile,
    ScenarioFile,
    SimulationFile,
    build_scenario,
)
from prfaas.sim.api import simulate_body
from prfaas.sim.config import DEPLOYMENT_OF_POLICY, chosen_plan
from prfaas.specs.errors import SpecError

#: Offered rates tried per seed, x the planned Lambda_max of the policy's deployment.
LOAD_FACTORS = (0.9, 1.0, 1.1, 1.25, 1.5)
#: t(0.975, df) for df = 1..9; larger df use the Cornish-Fisher expansion (within 0.2%).
_T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)
_Z_975 = 1.959964


def t_975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError("an interval needs at least 2 samples")
    if df <= len(_T_975):
        return _T_975[df - 1]
    z = _Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True, slots=True)
class SaturationEstimate:
    """A saturation throughput as a value with its 95% interval, and the samples behind it."""

    value_per_s: float
    low_per_s: float
    high_per_s: float
    samples_per_s: tuple[float, ...]
    planned_per_s: float

    @classmethod
    def of(cls, samples: Sequence[float], planned_per_s: float) -> SaturationEstimate:
        mean = statistics.fmean(samples)
        half = t_975(len(samples) - 1) * statistics.stdev(samples) / math.sqrt(len(samples))
        return cls(mean, mean - half, mean + half, tuple(samples), planned_per_s)

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


def seeded_saturation(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    policy: str,
    *,
    seeds: Sequence[int],
    num_requests: int = 2000,
) -> SaturationEstimate:
    """The saturation of `policy`'s planned deployment over `seeds` (module docstring)."""
    if body.workload.trace is not None:
        raise SpecError(
            "seeded saturation draws synthetic arrivals: give a scenario without a trace"
        )
    if len(seeds) < 2:
        raise SpecError("seeded saturation needs at least 2 seeds")
    scenario = build_scenario(body, base_dir, where)
    kind = DEPLOYMENT_OF_POLICY.get(policy)
    if kind is None:
        raise SpecError(f"unknown policy {policy!r} (known: {', '.join(DEPLOYMENT_OF_POLICY)})")
    planned = chosen_plan(scenario, body, base_dir).report.deployments[kind].lambda_max
    sim = (body.simulation or SimulationFile()).model_copy(
        update={"admission": AdmissionFile(mode="off")}
    )
    samples = []
    for seed in seeds:
        rates = []
        for factor in LOAD_FACTORS:
            arrivals = ArrivalsFile(rate_per_s=factor * planned, num_requests=num_requests)
            seeded = sim.model_copy(update={"seed": seed})
            run_body = body.model_copy(update={"arrivals": arrivals, "simulation": seeded})
            run = simulate_body(run_body, base_dir, where, [policy])[0]
            rates.append(run.report.summary.request_throughput_per_s)
        samples.append(max(rates))
    return SaturationEstimate.of(samples, planned)
