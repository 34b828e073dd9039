"""A role flip (by hand or by the slow loop: both go through `SlowLoop.request_flip`) keeps an
instance's shape, and a shape is its chip, GPU count and split (issue 30): PD-P and PD-D of
the same chip and GPUs but split differently do not swap roles; the 400 names both shapes
with their splits. Live, through the HTTP API: tests/serve/test_two_shape_deployment.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    InstanceRole,
    InstanceSpec,
    RebalanceSpec,
)
from prfaas.serve.config.parallelism_spec import ParallelismSpec
from prfaas.serve.errors import BadRequestError
from prfaas.serve.router.rebalance import SlowLoop, instance_shape
from prfaas.serve.router.registry import LiveInstance


def _spec(name: str, role: InstanceRole, split: ParallelismSpec | None) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        role=role,
        cluster="pd",
        backend=Backend.EMULATED,
        chip="h200",
        gpus_per_instance=8,
        parallelism=split,
    )


def _runtime(*specs: InstanceSpec) -> Any:
    """What `request_flip` reads of a router: its deployment, registry and lease."""
    deployment = Deployment(model="qwen3-235b", instances=specs)
    instances = {s.name: LiveInstance(spec=s, role=s.role, is_healthy=True) for s in specs}
    return SimpleNamespace(
        deployment=deployment,
        registry=SimpleNamespace(instances=instances),
        lease=SimpleNamespace(fence=lambda: None),
    )


def test_a_flip_into_a_role_split_otherwise_is_refused_naming_both_splits() -> None:
    rt = _runtime(
        _spec("pdp-0", InstanceRole.PD_PREFILL, ParallelismSpec(tp=8, ep=8)),
        _spec("pdd-0", InstanceRole.PD_DECODE, ParallelismSpec(tp=1, dp=8, ep=8)),
    )
    loop = SlowLoop(RebalanceSpec())
    with pytest.raises(BadRequestError) as err:
        loop.request_flip(rt, "pdp-0", InstanceRole.PD_DECODE, trigger="test")
    assert str(err.value) == (
        "instance pdp-0 (8 x h200 tp8 ep8) cannot take pd-decode: the deployment's pd-decode "
        "instances are 8 x h200 tp1 ep8 dp8 (a role flip keeps an instance's shape)"
    )
    assert not rt.registry.instances["pdp-0"].is_draining


def test_a_written_default_split_is_the_shape_of_an_unwritten_one() -> None:
    # tp8 ep8 is qwen3-235b's default split on 8 GPUs: one shape, so these may swap roles
    rt = _runtime(
        _spec("pdp-0", InstanceRole.PD_PREFILL, None),
        _spec("pdp-1", InstanceRole.PD_PREFILL, None),
        _spec("pdd-0", InstanceRole.PD_DECODE, ParallelismSpec(tp=8, ep=8)),
    )
    shapes = {instance_shape(rt.deployment, s) for s in rt.deployment.instances}
    assert shapes == {"8 x h200 tp8 ep8"}
