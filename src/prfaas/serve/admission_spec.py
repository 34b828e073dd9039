"""The deployment file's `router.admission` block: admission control's settings.

    router: {admission: {mode: shed, ttft_slo_s: 10, margin_fraction: 0, max_defer_s: 30}}

A configuration model, apart from the behaviour that carries it out (`serve.admission`), so
that `serve.config` embeds it without importing the router's HTTP code. `policy()` builds the
scheduler's pure `AdmissionPolicy` (prfaas.scheduler.admission), the simulator's own object.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from prfaas.planner.scenario import AdmissionModeName
from prfaas.scheduler import AdmissionConfig, AdmissionMode, AdmissionPolicy


class AdmissionSpec(BaseModel):
    """`router.admission` in the deployment file (defaults: docs/scheduler.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: AdmissionModeName = "shed"  # on by default; "off" (or YAML's bare off) is explicit
    ttft_slo_s: float = Field(default=10.0, gt=0)
    margin_fraction: float = Field(default=0.0, ge=0)
    max_defer_s: float = Field(default=30.0, ge=0)

    def policy(self) -> AdmissionPolicy | None:
        mode = AdmissionMode(self.mode)
        if mode is AdmissionMode.OFF:
            return None
        return AdmissionPolicy(
            AdmissionConfig(
                mode=mode,
                ttft_slo_s=self.ttft_slo_s,
                margin_fraction=self.margin_fraction,
                max_defer_s=self.max_defer_s,
            )
        )
