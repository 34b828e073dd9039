"""The deployment file's `router.admission` block: admission control's settings.

    router: {admission: {mode: shed, ttft_slo_s: 10, margin_fraction: 0, max_defer_s: 30}}

A configuration model, apart from the behaviour that carries it out (`serve.router.admission`), so
that the deployment file embeds it without importing the router's HTTP code. `scheduler.assemble`
builds the scheduler's pure `AdmissionPolicy` from it, as it does from a scenario file's.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from prfaas.planner.scenario import DEFAULT_TTFT_SLO_S, AdmissionFile


class AdmissionSpec(AdmissionFile):
    """`router.admission` in the deployment file: the scenario files' admission schema (one set
    of defaults, docs/scheduler.md) plus the TTFT objective, which a scenario gives in its
    `slo` and a router has nowhere else."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_slo_s: float = Field(default=DEFAULT_TTFT_SLO_S, gt=0)
