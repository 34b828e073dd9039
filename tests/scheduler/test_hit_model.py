"""The pool-aware hit model: close to the ideal replay when nothing limits it, and each effect it
models moves the prediction the way it moves the simulator (queueing, pool size)."""

from __future__ import annotations

from prfaas.kvcache.cache import CacheConfig
from prfaas.planner.scenario import load_scenario
from prfaas.scheduler.hit_model import PoolDeployment, pool_replay
from prfaas.workload.prefix import replay_prefix_cache
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


def test_queueing_delays_hits() -> None:
    trace = conversations()
    relaxed = pool_replay(trace, deployment(2), time_scale=100.0).hit_fraction
    burst = pool_replay(trace, deployment(2), time_scale=1e-6).hit_fraction
    assert burst < relaxed  # turns arrive before their previous turn's blocks are committed


def test_a_tiny_pool_hits_less() -> None:
    trace = conversations()
    big = pool_replay(trace, deployment(2), time_scale=100.0).hit_fraction
    small = pool_replay(trace, deployment(2, gib=2), time_scale=100.0).hit_fraction
    assert small < big
