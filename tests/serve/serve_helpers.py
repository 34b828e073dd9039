"""Shared builders for the serve tests."""

from __future__ import annotations

from typing import Any

from prfaas.serve.config import (
    Backend,
    Deployment,
    EmulationSpec,
    InstanceRole,
    InstanceSpec,
    RouterSpec,
)


def emulated_instance(name: str, role: InstanceRole, cluster: str, chip: str) -> InstanceSpec:
    """An emulated instance with a pool large enough for any test prompt."""
    return InstanceSpec(
        name=name,
        role=role,
        cluster=cluster,
        backend=Backend.EMULATED,
        chip=chip,
        capacity_mib=8192,
    )


def emulated_deployment(**updates: Any) -> Deployment:
    """A PrfaaS + PD-P + PD-D emulated deployment of `prfaas-1t` (fast: 1% of modelled time),
    router on a free port; `updates` replace its fields."""
    deployment = Deployment(
        model="prfaas-1t",
        block_tokens=16,
        threshold_tokens=128,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=0.01, byte_factor=1 / 4096),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )
    return deployment.model_copy(update=updates)
