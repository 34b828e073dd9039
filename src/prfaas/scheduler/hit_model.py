"""What the pools will hit: a trace replay through per-instance hybrid pools with the
scheduler's placement, for the planner (docs/planner.md, pool-aware hit model).

The planner's own replay (`workload.prefix`) is the ideal: one pooled LRU cache of blocks,
every earlier prompt's blocks available at once. A deployment sees less:

1. *Snapshot boundaries*: on a hybrid model a hit needs a state snapshot at exactly its
   boundary, and the pool takes snapshots only where its `SnapshotPolicy` says. The replay
   uses the real `HybridPrefixCache`, so its hit rule and policy are the simulator's.
2. *Finite pools*: each instance has its own pool of the configured size (`CacheConfig`),
   with the pool's own eviction.
3. *Per-instance caches and placement*: a prompt's prefix helps only on the instance that
   holds it. Each request takes the path of the PrfaaS length rule (remote iff l - l_pd > t,
   l_pd the best PD-P hit; all PD-P for homogeneous PD) and the instance `choose_prefill`
   picks: cache affinity within (1 + epsilon) of the earliest finish.
4. *Queueing*: instances run FCFS in virtual time at the offered rate (trace timestamps x
   `time_scale`, prefill times from the profiles), and a request's blocks join its pool when
   its prefill ends. A conversation turn that arrives while its previous turn still waits
   therefore misses, as it does in the simulator near saturation.

No decode, link or cache moves: those do not change what the prefill pools hold. The result
is per-request uncached lengths the planner plans on (`Workload.from_replay`).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from prfaas.kvcache.cache import CacheConfig, HybridPrefixCache
from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId
from prfaas.kvcache.values import OutOfPages
from prfaas.planner.model import Hardware
from prfaas.planner.plan import plan
from prfaas.scheduler.load import DispatchLedger, choose_prefill
from prfaas.scheduler.view import InstanceView, Role
from prfaas.specs.perf import PerfProfile
from prfaas.workload.prefix import PrefixReplay
from prfaas.workload.trace import TraceRequest
from prfaas.workload.workload import Workload


@dataclass(frozen=True, slots=True)
class PoolDeployment:
    """The prefill side of a deployment as the hit model needs it."""

    num_prfaas: int
    num_pd_prefill: int
    threshold_tokens: int
    prfaas_profile: PerfProfile
    pd_profile: PerfProfile
    cache: CacheConfig
    load_slack: float = 0.25


@dataclass(slots=True)
class _Instance:
    view: InstanceView
    pool: HybridPrefixCache
    profile: PerfProfile
    busy_until_s: float = 0.0


def _place(
    candidates: list[_Instance],
    hits: dict[InstanceId, int],
    input_tokens: int,
    now_s: float,
    load_slack: float,
) -> _Instance:
    """The scheduler's prefill choice, with each instance's queue as its virtual busy time."""
    by_id = {i.view.instance_id: i for i in candidates}

    def work_s(view: InstanceView) -> float:
        inst = by_id[view.instance_id]
        wait_s = max(0.0, inst.busy_until_s - now_s)
        return wait_s + inst.profile.prefill_s(input_tokens - hits[view.instance_id])

    chosen = choose_prefill(
        [i.view for i in candidates],
        lambda view: hits[view.instance_id],
        work_s,
        DispatchLedger(),  # queued work is in work_s already; the ledger stays empty
        load_slack,
    )
    return by_id[chosen.instance_id]


def pool_replay(
    requests: Sequence[TraceRequest], deployment: PoolDeployment, time_scale: float
) -> PrefixReplay:
    """Uncached and cached tokens of each request (arrival order); module docstring."""
    scheme = deployment.cache.hash_scheme
    instances = [
        _Instance(
            InstanceView(InstanceId(f"{role}-{k}"), ClusterId(str(role)), role),
            HybridPrefixCache(deployment.cache, InstanceId(f"{role}-{k}")),
            deployment.prfaas_profile if role is Role.PRFAAS else deployment.pd_profile,
        )
        for role, count in (
            (Role.PRFAAS, deployment.num_prfaas),
            (Role.PD_PREFILL, deployment.num_pd_prefill),
        )
        for k in range(count)
    ]
    pd = [i for i in instances if i.view.role is Role.PD_PREFILL]
    remote = [i for i in instances if i.view.role is Role.PRFAAS]
    pending: list[tuple[float, int, int, RequestId]] = []  # (commit at, seq, instance, rid)
    uncached: list[int] = []
    cached: list[int] = []
    for seq, request in enumerate(requests):
        now_s = request.timestamp_ms / 1000.0 * time_scale
        while pending and pending[0][0] <= now_s:
            _, _, index, rid = heapq.heappop(pending)
            instances[index].pool.commit(rid)
            instances[index].pool.release(rid)
        rid = RequestId(f"r{seq}")
        cache_request = scheme.mooncake_request(rid, request.hash_ids, request.input_tokens)
        hits = {
            i.view.instance_id: min(
                i.pool.match(cache_request).hit_tokens, request.input_tokens - 1
            )
            for i in instances
        }
        l_pd = max((hits[i.view.instance_id] for i in pd), default=0)
        is_remote = bool(remote) and (
            not pd or request.input_tokens - l_pd > deployment.threshold_tokens
        )
        chosen = _place(
            remote if is_remote else pd, hits, request.input_tokens, now_s, deployment.load_slack
        )
        allocation = chosen.pool.allocate(cache_request)
        hit = 0
        if not isinstance(allocation, OutOfPages):
            hit = min(allocation.match.hit_tokens, request.input_tokens - 1)
        start_s = max(now_s, chosen.busy_until_s)
        chosen.busy_until_s = start_s + chosen.profile.prefill_s(request.input_tokens - hit)
        if not isinstance(allocation, OutOfPages):
            heapq.heappush(pending, (chosen.busy_until_s, seq, instances.index(chosen), rid))
        uncached.append(request.input_tokens - hit)
        cached.append(hit)
    return PrefixReplay(tuple(uncached), tuple(cached))


@dataclass(frozen=True, slots=True)
class PoolAwarePoint:
    """One deployment planned on the hits its pools would see at its own Lambda_max."""

    deployment: str  # "prfaas_pd" or "homogeneous_pd"
    ideal_hit_fraction: float  # the planner's pooled, unbounded replay
    predicted_hit_fraction: float  # this model's
    ideal_lambda_max: float
    lambda_max: float
    threshold_tokens: int | None
    n_prfaas: int
    n_p: int
    n_d: int
    time_scale: float  # the trace time scale whose offered rate is lambda_max
    iterations: int


POOL_AWARE_DEPLOYMENTS = ("prfaas_pd", "homogeneous_pd")


def pool_aware_plan(
    requests: Sequence[TraceRequest],
    hardware: Hardware,
    cache: CacheConfig,
    step_tokens: int,
    *,
    max_iterations: int = 4,
    rel_tol: float = 0.01,
) -> list[PoolAwarePoint]:
    """Plan each deployment on its predicted hits, at the rate it is planned for.

    The hits depend on the rate (queueing delays commits) and the rate on the hits, so this
    iterates to a fixed point: plan on the ideal replay, replay the pools at that Lambda_max,
    re-plan on what they hit, and repeat until Lambda_max moves by less than `rel_tol`."""
    span_s = (requests[-1].timestamp_ms - requests[0].timestamp_ms) / 1000.0
    trace_rate = len(requests) / span_s
    ideal = Workload.from_trace(requests, None, "ideal replay", cache.layout.block_tokens)
    ideal_report = plan(hardware, ideal, step_tokens)
    out = []
    for name in POOL_AWARE_DEPLOYMENTS:
        point = ideal_report.deployments[name]
        lam, scale, hit, iterations = point.lambda_max, 1.0, ideal.prefix_hit_fraction, 0
        for iterations in range(1, max_iterations + 1):  # noqa: B007 (reported)
            scale = trace_rate / lam
            replay = pool_replay(
                requests,
                PoolDeployment(
                    point.n_prfaas,
                    point.n_p,
                    point.threshold_tokens or 0,
                    hardware.prfaas.profile,
                    hardware.pd.profile,
                    cache,
                ),
                scale,
            )
            workload = Workload.from_replay(requests, replay, "pool-aware replay")
            hit = workload.prefix_hit_fraction
            point = plan(hardware, workload, step_tokens).deployments[name]
            moved = abs(point.lambda_max - lam) / lam
            lam = point.lambda_max
            if moved < rel_tol:
                break
        out.append(
            PoolAwarePoint(
                deployment=name,
                ideal_hit_fraction=ideal.prefix_hit_fraction,
                predicted_hit_fraction=hit,
                ideal_lambda_max=ideal_report.deployments[name].lambda_max,
                lambda_max=lam,
                threshold_tokens=point.threshold_tokens,
                n_prfaas=point.n_prfaas,
                n_p=point.n_p,
                n_d=point.n_d,
                time_scale=trace_rate / lam,
                iterations=iterations,
            )
        )
    return out
