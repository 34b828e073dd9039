"""The pool-aware hit model: close to the ideal replay when nothing limits it, and each effect it
models moves the prediction the way it moves the simulator (queueing, pool size)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.kvcache.cache import CacheConfig
from prfaas.kvcache.tiers import Medium, TierSpec
from prfaas.planner.scenario import AdmissionFile, DeploymentFile, load_scenario, read_scenario_file
from prfaas.scheduler.hit_model import PoolDeployment, pool_replay
from prfaas.sim.api import simulate_body, with_trace
from prfaas.workload.prefix import replay_prefix_cache
from prfaas.workload.prefix_heavy import PrefixHeavySpec, prefix_heavy_trace, write_mooncake_trace
from prfaas.workload.trace import TraceRequest

SCENARIO = load_scenario("paper-case-study-mooncake")
MODEL = SCENARIO.hardware.pd.profile.model


def conversations(num: int = 240, gap_ms: float = 2000.0) -> tuple[TraceRequest, ...]:
    """Conversations of 4 turns, interleaved; each turn extends the previous prompt."""
    out = []
    for i in range(num):
        conv, turn = i % 30, i // 30 % 4
        ids = tuple(conv * 1000 + k for k in range(6 + 6 * turn))
        out.append(TraceRequest(i * gap_ms, len(ids) * 512 - 100, 50, ids))
    return tuple(out)


def deployment(n_p: int, gib: float = 256) -> PoolDeployment:
    hw = SCENARIO.hardware
    cache = CacheConfig.for_model(MODEL, block_tokens=512, capacity_bytes=int(gib * 2**30))
    return PoolDeployment(0, n_p, 0, hw.prfaas.profile, hw.pd.profile, cache)


def test_one_relaxed_instance_gets_close_to_the_ideal() -> None:
    trace = conversations()
    ideal = replay_prefix_cache(trace, None).hit_fraction
    one = pool_replay(trace, deployment(1), time_scale=100.0).hit_fraction
    # The pool also reuses the trace's named partial last blocks, which the ideal replay
    # (full blocks only) does not: the two differ by a few points either way.
    assert abs(one - ideal) <= 0.05


def _simulated_hit(
    tmp_path: Path, trace: tuple[TraceRequest, ...], dep: PoolDeployment, policy: str, scale: float
) -> float:
    """The simulator's token hit fraction on `trace` with the deployment pinned."""
    path = tmp_path / "trace.jsonl"
    write_mooncake_trace(trace, path)
    body, base = read_scenario_file("paper-case-study-mooncake")
    body = with_trace(body, path)
    assert body.simulation is not None and body.arrivals is not None
    pin = DeploymentFile(
        n_prfaas=dep.num_prfaas,
        n_p=dep.num_pd_prefill,
        n_d=2,
        threshold_tokens=max(1, dep.threshold_tokens),
    )
    body = body.model_copy(
        update={
            # every request admitted: the hit model has no admission control
            "simulation": body.simulation.model_copy(
                update={"deployment": pin, "admission": AdmissionFile(mode="off")}
            ),
            "arrivals": body.arrivals.model_copy(update={"time_scale": scale}),
        }
    )
    return simulate_body(body, base, "test", [policy])[0].report.prefix_hit_fraction


@pytest.mark.parametrize(
    ("policy", "num_prfaas", "num_pd_prefill", "rate_per_s"),
    [
        ("homogeneous", 0, 3, 1.0),  # relaxed
        ("homogeneous", 0, 3, 4.0),  # past saturation: queues grow, affinity gives way
        ("prfaas", 2, 2, 1.5),
        ("prfaas", 2, 2, 3.5),  # near saturation (past it, the surge gates reroute)
    ],
)
def test_the_model_hits_what_the_simulator_hits(
    tmp_path: Path, policy: str, num_prfaas: int, num_pd_prefill: int, rate_per_s: float
) -> None:
    """Same trace, same deployment, same arrivals: the model's routing, placement, queues and
    pools are the simulator's, so the token hit fractions agree (docs/planner.md)."""
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=300, rate_per_s=rate_per_s, seed=3))
    hw = SCENARIO.hardware
    cache = CacheConfig.for_model(MODEL, block_tokens=512, capacity_bytes=512 * 2**30)
    dep = PoolDeployment(num_prfaas, num_pd_prefill, 8000, hw.prfaas.profile, hw.pd.profile, cache)
    predicted = pool_replay(trace, dep, time_scale=1.0).hit_fraction
    simulated = _simulated_hit(tmp_path, trace, dep, policy, 1.0)
    assert predicted == pytest.approx(simulated, abs=0.02)


def test_queueing_delays_hits() -> None:
    """A turn arriving while its previous turn still waits finds nothing in the index, so
    placement cannot follow its prefix; once queues are long, turns land on colder instances."""
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=300, seed=3))
    relaxed = pool_replay(trace, deployment(3), time_scale=10.0).hit_fraction
    burst = pool_replay(trace, deployment(3), time_scale=0.01).hit_fraction
    assert burst < relaxed


def test_a_tiny_pool_hits_less() -> None:
    trace = conversations()
    big = pool_replay(trace, deployment(2), time_scale=100.0).hit_fraction
    small = pool_replay(trace, deployment(2, gib=2), time_scale=100.0).hit_fraction
    assert small < big


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_prfaas=st.integers(0, 2),
    num_pd_prefill=st.integers(0, 2),
    threshold_tokens=st.integers(0, 20_000),
    time_scale=st.sampled_from([0.001, 0.3, 1.0, 50.0]),
)
def test_every_request_is_accounted_for(
    seed: int, num_prfaas: int, num_pd_prefill: int, threshold_tokens: int, time_scale: float
) -> None:
    """Any deployment, any load: each request's cached and uncached tokens add up to its
    prompt, at least one token is computed, and the judged length is a real length."""
    if num_prfaas + num_pd_prefill == 0:
        num_pd_prefill = 1
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=60, seed=seed))
    hw = SCENARIO.hardware
    cache = CacheConfig.for_model(MODEL, block_tokens=512, capacity_bytes=64 * 2**30)
    dep = PoolDeployment(
        num_prfaas, num_pd_prefill, threshold_tokens, hw.prfaas.profile, hw.pd.profile, cache
    )
    replay = pool_replay(trace, dep, time_scale)
    assert replay.routed_tokens is not None
    for request, uncached, cached, routed in zip(
        trace, replay.uncached_tokens, replay.cached_tokens, replay.routed_tokens, strict=True
    ):
        assert uncached + cached == request.input_tokens
        assert uncached >= 1 and cached >= 0
        assert 1 <= routed <= request.input_tokens


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_prfaas=st.integers(0, 2),
    num_pd_prefill=st.integers(1, 3),
    time_scale=st.sampled_from([0.001, 0.5, 20.0]),
)
def test_no_request_hits_more_than_the_ideal_replay(
    seed: int, num_prfaas: int, num_pd_prefill: int, time_scale: float
) -> None:
    """The pools hold a subset of what every earlier prompt left (per instance, committed
    later, finite), so no request hits more than the pooled, unbounded, instant replay, up to
    the named partial last block the pools also reuse (the ideal counts full blocks only)."""
    trace = prefix_heavy_trace(PrefixHeavySpec(num_requests=80, seed=seed))
    hw = SCENARIO.hardware
    cache = CacheConfig.for_model(MODEL, block_tokens=512, capacity_bytes=256 * 2**30)
    dep = PoolDeployment(num_prfaas, num_pd_prefill, 6000, hw.prfaas.profile, hw.pd.profile, cache)
    pooled = pool_replay(trace, dep, time_scale)
    ideal = replay_prefix_cache(trace, None)
    for got, bound in zip(pooled.cached_tokens, ideal.cached_tokens, strict=True):
        assert got <= bound + 512
    assert pooled.hit_fraction <= ideal.hit_fraction + 512 * len(trace) / sum(
        r.input_tokens for r in trace
    )


def test_a_disk_tier_below_small_pools_raises_the_predicted_hits() -> None:
    """The same pools with a disk tier below them keep what DRAM evicts: more hits, never
    fewer, and exactly the DRAM-only prediction when the disk tier holds nothing."""
    trace = conversations()
    small = deployment(1, gib=8)
    dram_only = pool_replay(trace, small, time_scale=100.0).hit_fraction
    disk = TierSpec(Medium.DISK, 64 * 2**30, 2 * 2**30, 2**30)
    tiered = replace(small, cache=replace(small.cache, lower_tier=disk))
    assert pool_replay(trace, tiered, time_scale=100.0).hit_fraction > dram_only
    empty = replace(small, cache=replace(small.cache, lower_tier=replace(disk, capacity_bytes=0)))
    assert pool_replay(trace, empty, time_scale=100.0).hit_fraction == dram_only
