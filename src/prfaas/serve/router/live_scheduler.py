"""The router's scheduler: the deployment file's settings, assembled as the simulator's are.

    RouterRuntime.scheduler -> build_scheduler(deployment, registry, can_move_cache)
        -> scheduler.assemble(scheduler_setup(deployment), SchedulerConfig(live profiles), hw)

Only the timing models are the router's own: the prefill timing the instances publish
(serve.profile), the PrfaaS profile from a PrfaaS instance, the PD one from a PD-P (else any
PD instance). Policy, t at start, admission control and the slow loop come from the file
through the schema the simulator reads (`scheduler.SchedulerSetup`), so one file's
`policy: dynamo` runs the very object `prfaas simulate --policy dynamo` runs.
"""

from __future__ import annotations

from dataclasses import replace

from prfaas.scheduler import GlobalScheduler, SchedulerConfig, SchedulerSetup, assemble
from prfaas.serve.config.deployment import Deployment, InstanceRole
from prfaas.serve.errors import NoCapacityError
from prfaas.serve.profile import published_profile
from prfaas.serve.router.rebalance import live_hardware
from prfaas.serve.router.registry import Registry


def scheduler_setup(deployment: Deployment) -> SchedulerSetup:
    """The deployment file's scheduler settings, as `scheduler.assemble` takes them (the
    simulator reads the same schema from its scenario: `sim.runner.scheduler_setup`)."""
    admission, spec = deployment.router.admission, deployment.rebalance
    return SchedulerSetup(
        policy=deployment.policy,
        threshold_tokens=deployment.threshold_tokens,
        admission=admission,
        ttft_slo_s=admission.ttft_slo_s,
        rebalance=spec if spec.enabled else None,
    )


def build_scheduler(
    deployment: Deployment, registry: Registry, can_move_cache: bool
) -> GlobalScheduler:
    """The scheduler over the timing the healthy instances publish (503 while none is up)."""
    infos = [i.info for i in registry.healthy() if i.info is not None]
    if not infos:
        raise NoCapacityError("no instance is up")
    pd = published_profile(
        registry.timing((InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE))
        or registry.timing((InstanceRole.PRFAAS_PREFILL,)),
        infos[0],
    )
    prfaas_timing = registry.timing((InstanceRole.PRFAAS_PREFILL,))
    prfaas = published_profile(prfaas_timing, infos[0]) if prfaas_timing else None
    config = SchedulerConfig(prfaas_profile=prfaas, pd_profile=pd, can_move_cache=can_move_cache)
    decode_batch = min(
        (s.max_batch_size for s in deployment.instances if not s.role.is_prefill), default=None
    )
    hardware = live_hardware(
        deployment.rebalance,
        prfaas,
        replace(pd, max_batch_size=decode_batch),
        deployment.link.rate_gbps,
    )
    return assemble(scheduler_setup(deployment), config, hardware)
