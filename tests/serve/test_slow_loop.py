"""The router's slow loop without processes: what it measures (`SlowLoop.stats`, on a patched
clock) and what the scheduler's `RebalancePolicy` decides over the live profiles."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId
from prfaas.scheduler import (
    ClusterView,
    FlipRole,
    GlobalScheduler,
    InstanceView,
    LinkView,
    PrfaasPolicy,
    RebalanceConfig,
    RebalancePolicy,
    Role,
    SchedulerConfig,
    SetThreshold,
    StageStats,
    Window,
)
from prfaas.serve.config.deployment import (
    InstanceRole,
    InstanceSpec,
    RebalanceSpec,
    default_deployment,
)
from prfaas.serve.profile import LiveProfile, PrefillTiming
from prfaas.serve.router import rebalance
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.registry import Registry


def _profile(s_per_token: float, max_batch_size: int | None = None) -> LiveProfile:
    timing = PrefillTiming.sampled(
        "test", 8192, lambda n: 0.05 + s_per_token * n, lambda n: 1000.0 * n
    )
    return LiveProfile(timing, max_batch_size=max_batch_size)


def test_the_planner_over_live_profiles_lowers_t_and_wants_a_second_pd_p() -> None:
    spec = RebalanceSpec(min_samples=8, step_tokens=64)
    hardware = rebalance.live_hardware(spec, _profile(1e-3), _profile(2e-3, 16), link_gbps=1.0)
    policy = RebalancePolicy(RebalanceConfig.of(hardware, spec))
    views = (
        InstanceView(InstanceId("prfaas-0"), ClusterId("prfaas"), Role.PRFAAS),
        InstanceView(InstanceId("pdp-0"), ClusterId("pd"), Role.PD_PREFILL),
        InstanceView(InstanceId("pdd-0"), ClusterId("pd"), Role.PD_DECODE),
        InstanceView(InstanceId("pdd-1"), ClusterId("pd"), Role.PD_DECODE),
    )
    window = Window()
    for n in (60, 60, 400, 400, 1200, 1200, 2000, 2000):
        window.uncached_tokens.append(n)
        window.input_tokens += n
        window.output_tokens += 8
    stats = StageStats(0.9, 0.05, 0.0, 0, 1.25e8)  # PD-P busy, without a queue: no bottleneck
    actions = policy.step(ClusterView(0.0, views, LinkView(1.25e8)), stats, window, 100_000)
    assert isinstance(actions[0], SetThreshold) and actions[0].threshold_tokens < 100_000
    assert actions[1] == FlipRole(InstanceId("pdd-1"), Role.PD_PREFILL, actions[1].reason)


def test_stats_are_what_the_period_observed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(rebalance.time, "monotonic", lambda: clock[0])
    deployment = default_deployment().model_copy(
        update={
            "instances": (
                InstanceSpec(name="pdp-0", role=InstanceRole.PD_PREFILL, cluster="pd"),
                InstanceSpec(name="pdd-0", role=InstanceRole.PD_DECODE, cluster="pd"),
            )
        }
    )
    registry = Registry(deployment, cast(HttpInstanceClient, None))
    for inst in registry.instances.values():
        inst.is_healthy = True
    config = SchedulerConfig(None, _profile(1e-3), can_move_cache=False)
    scheduler = GlobalScheduler(PrfaasPolicy(config), config, 96)
    scheduler.ledger.dispatch(RequestId("r"), InstanceId("pdp-0"), 3.0, InstanceId("pdd-0"), 1.0)
    rt: Any = SimpleNamespace(registry=registry, scheduler=scheduler)
    slow = rebalance.SlowLoop(RebalanceSpec())
    slow.stats(rt)  # the baseline
    clock[0] += 10.0
    registry.instances["pdp-0"].prefill_busy_s += 4.0  # busy 4 s of 10
    registry.instances["pdd-0"].decode_slot_s += 2.5  # a quarter of the batch, on average
    registry.instances["pdd-0"].num_waiting = 3
    stats = slow.stats(rt)
    assert stats.pd_prefill_utilisation == pytest.approx(0.4)
    assert stats.pd_decode_utilisation == pytest.approx(0.25)
    assert stats.pd_prefill_queue_s == pytest.approx(3.0)
    assert stats.decode_waiting_requests == 3
    assert stats.link_capacity_bytes_per_s == deployment.link.rate_bytes_per_s
