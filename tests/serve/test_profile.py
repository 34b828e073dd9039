"""The prefill timing instances publish and the router's scheduler profile built from it.

The router used to estimate every prefill with one linear model tuned to the tiny torch
presets; an emulated deployment's scheduler now sees the catalog profile of each cluster's
chip x time_factor (h200 for PrfaaS, h20 for PD), and the KV bytes x byte_factor.
"""

from __future__ import annotations

import pytest
from serve_helpers import emulated_instance

from prfaas.serve.backends.emulated import EmulatedBackend
from prfaas.serve.config.deployment import (
    Deployment,
    EmulationSpec,
    InstanceRole,
    RouterSpec,
)
from prfaas.serve.instance.runtime import build_runtime
from prfaas.serve.profile import LiveProfile, PrefillTiming, sample_lengths
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry
from prfaas.specs.catalog import get_chip, get_model, profile_for

TIME_FACTOR = 2.0
BYTE_FACTOR = 1 / 256


def _deployment(*, with_prfaas: bool = True) -> Deployment:
    instances = [
        emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
        emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
    ]
    if with_prfaas:
        instances.insert(
            0, emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200")
        )
    return Deployment(
        model="prfaas-1t",
        block_tokens=512,
        threshold_tokens=19_600,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=TIME_FACTOR, byte_factor=BYTE_FACTOR),
        instances=tuple(instances),
        secret="unit-test-secret-0123456789",
    )


def _scaled_prefill_s(chip: str, n: int) -> float:
    return profile_for(get_model("prfaas-1t"), get_chip(chip), 8).prefill_s(n) * TIME_FACTOR


def test_sample_lengths_are_four_per_octave_up_to_the_limit() -> None:
    lengths = sample_lengths(1024)
    assert lengths[0] == 1 and lengths[-1] == 1024
    assert {2, 4, 8, 512} <= set(lengths) and len(lengths) == len(set(lengths))
    assert list(lengths) == sorted(lengths)


def test_the_table_interpolates_exactly_at_samples_and_linearly_between() -> None:
    timing = PrefillTiming("t", (1, 10, 20), (1.0, 10.0, 30.0), (0.0, 9.0, 19.0))
    profile = LiveProfile(timing)
    assert profile.prefill_s(10) == 10.0 and profile.prefill_s(15) == 20.0
    assert profile.prefill_s(30) == 50.0  # extrapolated from the last two points
    assert profile.cache_bytes(20) == 19.0
    with pytest.raises(ValueError, match="increase"):
        PrefillTiming("t", (1, 1), (0.0, 0.0), (0.0, 0.0))


def test_an_emulated_instance_publishes_its_chip_profile_scaled() -> None:
    deployment = _deployment()
    for name, chip in [("prfaas-0", "h200"), ("pdp-0", "h20")]:
        info = build_runtime(deployment, name).info
        assert info.timing is not None
        profile = LiveProfile(
            PrefillTiming(
                info.timing.source,
                tuple(info.timing.lengths_tokens),
                tuple(info.timing.prefill_s),
                tuple(info.timing.cache_bytes),
            )
        )
        assert profile.prefill_s(4096) == pytest.approx(_scaled_prefill_s(chip, 4096))
        assert profile.prefill_s(19_000) == pytest.approx(_scaled_prefill_s(chip, 19_000), rel=0.01)
        backend = EmulatedBackend(deployment, deployment.instance(name))
        assert profile.cache_bytes(8192) == pytest.approx(backend.scaled_kv_bytes(8192), abs=1)


def _runtime(deployment: Deployment) -> RouterRuntime:
    client = HttpInstanceClient()
    registry = Registry(deployment, client)
    for spec in deployment.instances:
        live = registry.instances[spec.name]
        live.info, live.is_healthy = build_runtime(deployment, spec.name).info, True
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


def test_the_router_scheduler_estimates_each_cluster_with_its_own_chip() -> None:
    config = _runtime(_deployment()).scheduler.config
    for n in (2048, 16_384):
        assert config.prefill_s(True, n) == pytest.approx(_scaled_prefill_s("h200", n), rel=0.01)
        assert config.prefill_s(False, n) == pytest.approx(_scaled_prefill_s("h20", n), rel=0.01)
    assert config.prefill_s(True, 16_384) < config.prefill_s(False, 16_384)


def test_without_a_prfaas_cluster_the_scheduler_has_only_the_pd_profile() -> None:
    config = _runtime(_deployment(with_prfaas=False)).scheduler.config
    assert config.prfaas_profile is None
    assert config.prefill_s(False, 4096) == pytest.approx(_scaled_prefill_s("h20", 4096))


def test_an_instance_without_timing_gets_the_linear_default() -> None:
    deployment = _deployment(with_prfaas=False)
    rt = _runtime(deployment)
    for live in rt.registry.instances.values():
        assert live.info is not None
        live.info = live.info.model_copy(update={"timing": None})
    config = rt.scheduler.config
    assert config.prefill_s(False, 1000) == pytest.approx(0.01 + 2e-4 * 1000)
