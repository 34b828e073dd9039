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
   holds it. The router sees what a `GlobalKVCacheIndex` fed with the pools' events holds
   (committed blocks only, as in the simulator); each request takes the PrfaaS length rule's
   path (plentiful link with cache moves: remote iff l - max(l_pd, l_prfaas) > t, the longer
   prefix of the other cluster moved to the chosen instance; without moves remote iff
   l - l_pd > t; all PD-P for homogeneous PD) and the instance `choose_prefill` picks with
   the scheduler's ledger seconds (a running prefill at its full estimate).
4. *Queueing*: instances run FCFS in virtual time at the offered rate (trace timestamps x
   `time_scale`, prefill times from the profiles). A request's hit is taken when its prefill
   starts (the instance's earlier requests have committed by then) and its blocks are
   published when it ends, so a conversation turn arriving while its previous turn still
   waits is placed without knowing of it, as in the simulator near saturation.

5. *Tiers*: with a disk tier below the pools (`CacheConfig.lower_tier`), evicted blocks are
   demoted and hits promote them back at the tier's read rate, valued and capped as the
   simulator does (`scheduler.tiers`): the load time is added to the prefill it precedes.

No decode, link delays or surge gates: the model targets the saturation point, where they do
not move what the prefill pools hold (past saturation the simulator's gates reroute and the
two part). The result is per-request uncached lengths, and the length each request's path was
judged by at dispatch (`PrefixReplay.routed_tokens`), which the planner plans on
(`Workload.from_replay`: split by the judged length, stage work by the computed one).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from prfaas.kvcache.cache import CacheConfig, HybridPrefixCache
from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId
from prfaas.kvcache.index import GlobalKVCacheIndex
from prfaas.kvcache.values import CacheRequest, OutOfPages
from prfaas.planner.model import Hardware
from prfaas.planner.optimise import OperatingPoint
from prfaas.planner.plan import plan
from prfaas.scheduler.load import DispatchLedger, choose_prefill
from prfaas.scheduler.tiers import HitPricing, allocate_weighed, promotion_s, weighed_hits
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
    moves_cache: bool = True  # the host moves prefixes across clusters (a plentiful link)


@dataclass(slots=True)
class _Job:
    seq: int
    request: TraceRequest
    cache_request: CacheRequest
    moved_tokens: int  # a prefix moved here from the other cluster (0: none)
    estimate_s: float  # what the scheduler's ledger counts for it (hit seen at dispatch)
    has_entry: bool = False


@dataclass(slots=True)
class _Instance:
    view: InstanceView
    pool: HybridPrefixCache
    profile: PerfProfile
    queue: deque[_Job] = field(default_factory=deque)  # FCFS, the running job first
    #: Estimated seconds of the jobs dispatched here and not yet done: what the scheduler's
    #: `DispatchLedger` counts (a running prefill at its full estimate).
    ledger_s: float = 0.0


def _work_s(profile: PerfProfile, tokens: int) -> float:
    """A prefill's share of its instance: its latency over the prompts the instance runs at
    once (attention-DP ranks), so an instance of d ranks replays as one server d x faster,
    at its rate (the hits are what this replay times; the planner's TTFT is the latency)."""
    return profile.prefill_s(tokens) / profile.prefill_concurrency


def _place(
    candidates: list[_Instance], reuse: dict[InstanceId, int], input_tokens: int, slack: float
) -> _Instance:
    """The scheduler's prefill choice (`choose_prefill`) with each instance's ledger seconds."""
    by_id = {i.view.instance_id: i for i in candidates}

    def work_s(view: InstanceView) -> float:
        inst = by_id[view.instance_id]
        return inst.ledger_s + _work_s(inst.profile, input_tokens - reuse[view.instance_id])

    chosen = choose_prefill(
        [i.view for i in candidates],
        lambda view: reuse[view.instance_id],
        work_s,
        DispatchLedger(),  # queued work is in work_s already; the ledger stays empty
        slack,
    )
    return by_id[chosen.instance_id]


class _Replay:
    """The event loop of `pool_replay`: arrivals in order, prefill ends from a heap."""

    def __init__(self, deployment: PoolDeployment, num_requests: int) -> None:
        self.deployment = deployment
        self.block_tokens = deployment.cache.layout.block_tokens
        self.instances = [
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
        self.index = GlobalKVCacheIndex(deployment.cache.identity)
        for inst in self.instances:
            self.index.register_instance(
                inst.view.instance_id, inst.view.cluster_id, deployment.cache.identity
            )
        self.ends: list[tuple[float, int, int]] = []  # (prefill end, seq, instance index)
        self.cached = [0] * num_requests

    def publish(self, inst: _Instance) -> None:
        self.index.apply(inst.pool.take_events())

    def start(self, position: int, now_s: float) -> None:
        """Begin the head job of an instance: its hit is taken now (`PrefillFacet._begin`)."""
        inst = self.instances[position]
        job = inst.queue[0]
        allocation = allocate_weighed(inst.pool, job.cache_request, inst.profile)
        hit, load_s = job.moved_tokens, 0.0
        if not isinstance(allocation, OutOfPages):
            job.has_entry = True
            hit = max(hit, allocation.match.hit_tokens)
            load_s = promotion_s(inst.pool, allocation.num_promoted_pages)
        hit = min(hit, job.request.input_tokens - 1)
        self.cached[job.seq] = hit
        end_s = now_s + _work_s(inst.profile, job.request.input_tokens - hit) + load_s
        heapq.heappush(self.ends, (end_s, job.seq, position))

    def finish_until(self, now_s: float) -> None:
        """Every prefill ending by `now_s`: commit, publish, release the ledger, start the next."""
        while self.ends and self.ends[0][0] <= now_s:
            end_s, _, position = heapq.heappop(self.ends)
            inst = self.instances[position]
            job = inst.queue.popleft()
            if job.has_entry:
                inst.pool.commit(job.cache_request.request_id)
                inst.pool.release(job.cache_request.request_id)
            self.publish(inst)
            inst.ledger_s = max(0.0, inst.ledger_s - job.estimate_s)
            if inst.queue:
                self.start(position, end_s)

    def hits(self, request: TraceRequest, cache_request: CacheRequest) -> dict[InstanceId, int]:
        """What the router sees: the index's restorable prefix per instance (committed only),
        weighed as the simulator's router weighs it (`weighed_hits`); absent: no hit."""
        match = self.index.match(cache_request.block_hashes)
        tier = self.deployment.cache.lower_tier
        rate = tier.read_bytes_per_s if tier is not None else None
        profiles = {i.view.instance_id: i.profile for i in self.instances}
        return weighed_hits(
            match,
            self.block_tokens,
            request.input_tokens,
            lambda instance_id: HitPricing(profiles[instance_id], rate),
        )

    def arrive(self, seq: int, request: TraceRequest, now_s: float) -> int:
        """Route and dispatch one request; returns the uncached length its path was judged by."""
        d = self.deployment
        self.finish_until(now_s)
        cache_request = d.cache.hash_scheme.mooncake_request(
            RequestId(f"r{seq}"), request.hash_ids, request.input_tokens
        )
        hits = self.hits(request, cache_request)
        pd = [i for i in self.instances if i.view.role is Role.PD_PREFILL]
        remote = [i for i in self.instances if i.view.role is Role.PRFAAS]
        l_pd = max((hits.get(i.view.instance_id, 0) for i in pd), default=0)
        l_prfaas = max((hits.get(i.view.instance_id, 0) for i in remote), default=0)
        moved = 0
        if d.moves_cache and pd and remote:
            routed = request.input_tokens - max(l_pd, l_prfaas)
            is_remote = routed > d.threshold_tokens
            # The longer prefix in the other cluster crosses (PrfaasPolicy, plentiful link).
            if is_remote and l_pd > l_prfaas:
                moved = l_pd
            elif not is_remote and l_prfaas > l_pd:
                moved = l_prfaas
        else:
            routed = request.input_tokens - l_pd
            is_remote = bool(remote) and (not pd or routed > d.threshold_tokens)
        candidates = remote if is_remote else pd
        reuse = {
            i.view.instance_id: max(hits.get(i.view.instance_id, 0), moved) for i in candidates
        }
        chosen = _place(candidates, reuse, request.input_tokens, d.load_slack)
        if moved > hits.get(chosen.view.instance_id, 0):
            chosen.pool.insert_prefix(cache_request, moved)
            self.publish(chosen)
        estimate_s = _work_s(chosen.profile, request.input_tokens - reuse[chosen.view.instance_id])
        chosen.ledger_s += estimate_s
        chosen.queue.append(_Job(seq, request, cache_request, moved, estimate_s))
        if len(chosen.queue) == 1:
            self.start(self.instances.index(chosen), now_s)
        return max(1, routed)


def pool_replay(
    requests: Sequence[TraceRequest], deployment: PoolDeployment, time_scale: float
) -> PrefixReplay:
    """Uncached and cached tokens of each request (arrival order), and the uncached length its
    path was judged by at dispatch; module docstring."""
    replay = _Replay(deployment, len(requests))
    routed = [
        replay.arrive(seq, request, request.timestamp_ms / 1000.0 * time_scale)
        for seq, request in enumerate(requests)
    ]
    replay.finish_until(float("inf"))
    cached = replay.cached
    uncached = [r.input_tokens - c for r, c in zip(requests, cached, strict=True)]
    return PrefixReplay(tuple(uncached), tuple(cached), tuple(routed))


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
    point: OperatingPoint  # the whole operating point of the last round


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
                point=point,
            )
        )
    return out
