"""The cluster simulator: arrivals -> the real scheduler -> modelled instances and link.

    sim = Simulator(run_config, requests)
    result = sim.run()          # every request ends completed or explicitly rejected

One event loop drives everything. On an arrival the simulator builds the scheduler's
`ClusterView` (roles, draining, link signals) and the request's prefix hits from the global
KVCache index (fed by the prefill pools' events), and carries out the decision: an optional
cross-cluster prefix move over the link, prefill on the chosen instance, the KV over the link
(PrfaaS, fair-shared, pipelined with prefill) or over RDMA (PD-P, never the bottleneck, Eq. 4),
then decode. Stage completions are reported back to the scheduler, whose ledger counts load
from dispatch to done. A sampler records timelines; the slow loop runs every rebalance period.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from prfaas.kvcache.cache import CacheConfig
from prfaas.kvcache.ids import ClusterId, InstanceId
from prfaas.kvcache.index import GlobalKVCacheIndex
from prfaas.kvcache.values import CacheRequest
from prfaas.metrics.records import GapRuns, RequestRecord
from prfaas.planner.scenario import DEFAULT_TTFT_SLO_S
from prfaas.scheduler import (
    Deferral,
    FlipRole,
    LinkView,
    RebalanceAction,
    Rejection,
    RouteRequest,
    SchedulerConfig,
    SchedulerSetup,
    ServePath,
    assemble,
)
from prfaas.scheduler.tiers import HitPricing, lower_tier_of, weighed_hits
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.cluster import (
    SimInstance,
    ViewsCache,
    build_instances,
    cluster_view,
    stage_stats,
)
from prfaas.sim.config import RunConfig
from prfaas.sim.core import EventLoop, EventPriority
from prfaas.sim.instances import DecodeSeq, PrefillJob
from prfaas.sim.link import FairShareLink
from prfaas.sim.profiles import MemoProfile
from prfaas.sim.timeline import Timeline, TimelineSampler

GBPS = 1e9 / 8


def decode_gaps(first_token_s: float, segments: list[tuple[float, float, int]]) -> GapRuns:
    """Inter-token gaps as runs: a decode segment (start, step, count) emits tokens at
    start + step * k (k = 1..count), so it is one gap from the previous token, then count - 1
    gaps of one step."""
    runs: list[tuple[float, int]] = []
    append = runs.append
    last_s = first_token_s
    for start_s, step_s, count in segments:
        gap = start_s + step_s - last_s
        append((gap if gap > 0.0 else 0.0, 1))
        if count > 1:
            append((step_s, count - 1))
        last_s = start_s + step_s * count
    return tuple(runs)


@dataclass(slots=True)
class SimResult:
    records: list[RequestRecord]
    reasons: Counter[str]
    timeline: Timeline
    actions: list[tuple[float, RebalanceAction]]
    num_events: int
    end_s: float
    hit_tokens: int = 0
    input_tokens: int = 0
    paths: dict[str, str] = field(default_factory=dict)


def scheduler_setup(config: RunConfig) -> SchedulerSetup:
    """The scenario's scheduler settings, as `scheduler.assemble` takes them (the live router
    reads the same schema from its deployment file)."""
    sim = config.simulation
    return SchedulerSetup(
        policy=config.policy,
        threshold_tokens=config.deployment.threshold_tokens,
        admission=sim.admission,
        ttft_slo_s=sim.slo.ttft_s or DEFAULT_TTFT_SLO_S,
        rebalance=sim.rebalance,
        tpot_slo_s=sim.slo.tpot_s,
    )


class Simulator:
    def __init__(self, config: RunConfig, requests: list[SimRequest]) -> None:
        self.config = config
        self.requests = requests
        self.loop = EventLoop()
        hw = config.hardware
        self.prfaas_profile = MemoProfile(hw.prfaas.profile)
        self.pd_profile = MemoProfile(hw.pd.profile)
        # PD-D instances in their own shape where the plan gives them one (`sim.config`).
        self.decode_profile = (
            self.pd_profile if hw.pd_decode is None else MemoProfile(hw.pd_decode.profile)
        )
        capacity = hw.link_gbps * GBPS
        per_conn = config.link.per_connection_gbps
        limit = float("inf") if per_conn is None else per_conn * GBPS * config.link.connections
        self.link = FairShareLink(self.loop, capacity, config.link.rtt_s, limit)
        self.reverse_link = FairShareLink(self.loop, capacity, config.link.rtt_s, limit)
        sched_config = SchedulerConfig(
            prfaas_profile=self.prfaas_profile if config.deployment.n_prfaas else None,
            pd_profile=self.pd_profile,
            pd_decode_profile=None if hw.pd_decode is None else self.decode_profile,
        )
        self.scheduler = assemble(scheduler_setup(config), sched_config, hw)
        self.index: GlobalKVCacheIndex | None = None
        cache_config = self._cache_config()
        self.hash_scheme = cache_config.hash_scheme if cache_config is not None else None
        self.instances = build_instances(self, config, cache_config)
        self.views_cache: ViewsCache | None = None
        for inst in self.instances:
            inst.on_change = self._views_changed
        self.by_id = {i.instance_id: i for i in self.instances}
        if cache_config is not None:
            self.index = GlobalKVCacheIndex(cache_config.identity)
            for inst in self.instances:
                if inst.prefill.pool is not None:
                    self.index.register_instance(
                        inst.instance_id, inst.cluster_id, cache_config.identity
                    )
        self.records: list[RequestRecord] = []
        self.actions: list[tuple[float, RebalanceAction]] = []
        self.sampler = TimelineSampler(self)
        self.hit_tokens = 0
        self.moved_blocks = 0  # prefix blocks written into target pools by cache moves
        self._arrival_order: list[int] = []

    def _cache_config(self) -> CacheConfig | None:
        sim = self.config.simulation
        if sim.prefix_cache_gib <= 0 or not any(r.hash_ids for r in self.requests):
            return None
        model = self.config.hardware.pd.profile.model
        return CacheConfig.for_model(
            model,
            block_tokens=self.config.block_tokens,
            capacity_bytes=int(sim.prefix_cache_gib * 2**30),
            lower_tier=lower_tier_of(sim),
        )

    # --- the run ---------------------------------------------------------------------------

    def run(self, progress: Callable[[float], None] | None = None) -> SimResult:
        """Run to the end; `progress` gets the fraction of arrivals passed, 100 times."""
        # Arrivals are chained (each schedules the next) so the heap holds one, not all of them:
        # the same order as scheduling all upfront (ties stay in list order), a smaller heap.
        requests = self.requests
        self._arrival_order = sorted(range(len(requests)), key=lambda k: requests[k].arrival_s)
        self._schedule_arrival(0)
        for at_s, gbps in self.config.capacity_steps_gbps:
            self.loop.schedule(at_s, EventPriority.CAPACITY, self._set_capacity, gbps * GBPS)
        sim = self.config.simulation
        self.loop.schedule(0.0, EventPriority.CONTROL, self._sample, sim.sample_period_s)
        if self.scheduler.rebalancer is not None and sim.rebalance is not None:
            period = sim.rebalance.period_s
            self.loop.schedule(period, EventPriority.CONTROL, self._rebalance, period)
        horizon_s = max((r.arrival_s for r in self.requests), default=0.0)
        if progress is not None and horizon_s > 0:
            for k in range(1, 101):
                self.loop.run(until_s=horizon_s * k / 100)
                progress(k / 100)
        self.loop.run()
        return SimResult(
            records=self.records,
            reasons=self.scheduler.reasons,
            timeline=self.sampler.timeline,
            actions=self.actions,
            num_events=self.loop.num_events,
            end_s=self.loop.now_s,
            hit_tokens=self.hit_tokens,
            input_tokens=sum(r.input_tokens for r in self.requests),
        )

    def _schedule_arrival(self, position: int) -> None:
        if position < len(self._arrival_order):
            request = self.requests[self._arrival_order[position]]
            self.loop.schedule(
                request.arrival_s, EventPriority.ARRIVAL, self._arrive_next, position
            )

    def _arrive_next(self, position: int) -> None:
        self._schedule_arrival(position + 1)
        self._arrive(self.requests[self._arrival_order[position]])

    @property
    def is_done(self) -> bool:
        return len(self.records) == len(self.requests)

    def link_view(self) -> LinkView:
        link = self.link
        return LinkView(
            link.capacity_bytes_per_s, link.egress_bytes_per_s, link.bytes_waiting, link.rtt_s
        )

    def _views_changed(self) -> None:
        self.views_cache = None

    def _set_capacity(self, bytes_per_s: float) -> None:
        self.link.set_capacity(bytes_per_s)
        self.reverse_link.set_capacity(bytes_per_s)

    def _sample(self, period_s: float) -> None:
        self.sampler.sample()
        if not self.is_done:
            self.loop.schedule(
                self.loop.now_s + period_s, EventPriority.CONTROL, self._sample, period_s
            )

    def _rebalance(self, period_s: float) -> None:
        view = cluster_view(self)
        stats = stage_stats(self, period_s)
        for action in self.scheduler.rebalance(view, stats):
            self.actions.append((self.loop.now_s, action))
            if isinstance(action, FlipRole):
                self.by_id[action.instance_id].begin_flip(action.to_role)
        if not self.is_done:
            self.loop.schedule(
                self.loop.now_s + period_s, EventPriority.CONTROL, self._rebalance, period_s
            )

    # --- one request -----------------------------------------------------------------------

    def _cache_request(self, request: SimRequest) -> CacheRequest | None:
        """The request as the pools see it, hashed once for the index query and the pool."""
        if self.hash_scheme is None or not request.hash_ids:
            return None
        return self.hash_scheme.mooncake_request(
            request.request_id, request.hash_ids, request.input_tokens
        )

    def _hits(
        self, request: SimRequest, cache_request: CacheRequest | None
    ) -> dict[InstanceId, int]:
        """Each instance's hit as the router weighs it (`scheduler.tiers.weighed_hits`)."""
        if self.index is None or cache_request is None:
            return {}
        match = self.index.match(cache_request.block_hashes)
        tier = lower_tier_of(self.config.simulation)
        rate = tier.read_bytes_per_s if tier is not None else None
        return weighed_hits(
            match,
            self.config.block_tokens,
            request.input_tokens,
            lambda i: HitPricing(self.by_id[i].prefill.profile, rate),
        )

    def _arrive(self, request: SimRequest) -> None:
        cache_request = self._cache_request(request)
        route = RouteRequest(
            request.request_id,
            request.input_tokens,
            request.output_tokens,
            self._hits(request, cache_request),
        )
        waited_s = self.loop.now_s - request.arrival_s
        decision = self.scheduler.route(route, cluster_view(self), waited_s)
        if isinstance(decision, Deferral):
            # Held at the router: routed again later (hits looked up afresh), arrival unchanged.
            self.loop.schedule(
                self.loop.now_s + decision.retry_after_s,
                EventPriority.ARRIVAL,
                self._arrive,
                request,
            )
            return
        if isinstance(decision, Rejection):
            self._finish(
                RequestRecord(
                    request.request_id,
                    request.arrival_s,
                    request.input_tokens,
                    error=str(decision.reason),
                    is_rejected=decision.retry_after_s is not None,  # admission, not a failure
                )
            )
            return
        job = PrefillJob(request, decision, cache_request=cache_request)
        move = decision.cache_move
        if move is None:
            self.by_id[decision.prefill_instance_id].prefill.enqueue(job)
            return
        toward_pd = move.target_cluster_id == ClusterId("pd")
        link = self.link if toward_pd else self.reverse_link
        # Only the increment the target instance lacks crosses, with the state at its end:
        # S_kv(moved - held) (the receiver keeps the blocks it has, as begin_transfer's
        # first_block does on the live path).
        held = min(route.hit_on(decision.prefill_instance_id), move.tokens)
        num_bytes = self.pd_profile.cache_bytes(move.tokens - held)
        link.send(num_bytes, float("inf"), self._moved, job)

    def _moved(self, job: PrefillJob) -> None:
        inst = self.by_id[job.decision.prefill_instance_id]
        move = job.decision.cache_move
        if move is not None:
            self._insert_moved(inst, job, move.tokens)
        inst.prefill.enqueue(job)

    def _insert_moved(self, inst: SimInstance, job: PrefillJob, tokens: int) -> None:
        """Write the moved prefix into the target instance's pool as the receiver of a real
        transfer would: its blocks and the state snapshot at its end are cached (and published
        to the index) from delivery on, so later requests hit there too. A full pool (nothing
        evictable) leaves the pool as it was; the job still restores the moved KV it carries."""
        pool, cache_request = inst.prefill.pool, job.cache_request
        if pool is None or cache_request is None:
            return
        num_blocks = pool.insert_prefix(cache_request, tokens)
        if num_blocks:
            self.moved_blocks += num_blocks
            self._publish(inst)

    def prefill_started(self, job: PrefillJob, estimate_s: float) -> None:
        if job.decision.path is ServePath.PRFAAS:
            num_bytes = self.prfaas_profile.cache_bytes(job.request.input_tokens)
            job.flow = self.link.send(num_bytes, num_bytes / estimate_s, self._kv_delivered, job)

    def prefill_finished(self, job: PrefillJob) -> None:
        self.scheduler.prefill_done(job.request.request_id)
        self.hit_tokens += job.hit_tokens
        inst = self.by_id[job.decision.prefill_instance_id]
        self._publish(inst)
        if job.flow is not None:
            self.link.lift_cap(job.flow)
        else:
            num_bytes = self.pd_profile.cache_bytes(job.request.input_tokens)
            lag_s = max(
                0.0,
                num_bytes / (self.config.simulation.rdma_gbps * GBPS)
                - (self.loop.now_s - job.start_s),
            )
            self.loop.schedule(
                self.loop.now_s + lag_s, EventPriority.COMPLETION, self._kv_delivered, job
            )
        inst.settle_flip()

    def _kv_delivered(self, job: PrefillJob) -> None:
        inst = self.by_id[job.decision.prefill_instance_id]
        if job.transfer_id is not None and inst.prefill.pool is not None:
            inst.prefill.pool.complete_transfer(job.transfer_id)
            self._publish(inst)
        request = job.request
        kv = self.decode_profile.cache_bytes(request.input_tokens + request.output_tokens)
        seq = DecodeSeq(request, job, self.loop.now_s, kv, request.output_tokens - 1)
        self.by_id[job.decision.decode_instance_id].decode.arrive(seq)

    def decode_finished(self, seq: DecodeSeq) -> None:
        request = seq.request
        self.scheduler.decode_done(request.request_id)
        path = seq.job.decision.path
        self._finish(
            RequestRecord(
                request.request_id,
                request.arrival_s,
                request.input_tokens,
                seq.first_token_s,
                decode_gaps(seq.first_token_s, seq.segments),
                path=str(path),
                cached_tokens=seq.job.hit_tokens,
            )
        )
        self.by_id[seq.job.decision.decode_instance_id].settle_flip()

    def _finish(self, record: RequestRecord) -> None:
        self.records.append(record)

    def _publish(self, inst: SimInstance) -> None:
        if self.index is not None and inst.prefill.pool is not None:
            self.index.apply(inst.prefill.pool.take_events())
