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


def emulated_deployment(
    *, time_factor: float = 0.01, num_decode: int = 1, **updates: Any
) -> Deployment:
    """A small emulated PrfaaS-PD deployment of `prfaas-1t` on a free port: one PrfaaS
    prefill, one PD prefill and `num_decode` PD decode instances (t = 128 tokens);
    `updates` replace its fields."""
    decode = tuple(
        emulated_instance(f"pdd-{i}", InstanceRole.PD_DECODE, "pd", "h20")
        for i in range(num_decode)
    )
    deployment = Deployment(
        model="prfaas-1t",
        block_tokens=16,
        threshold_tokens=128,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=time_factor, byte_factor=1e-3),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            *decode,
        ),
    )
    return deployment.model_copy(update=updates)
