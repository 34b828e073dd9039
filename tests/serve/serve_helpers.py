"""Shared builders for the serve tests."""

from __future__ import annotations

from prfaas.serve.config import Backend, InstanceRole, InstanceSpec


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
