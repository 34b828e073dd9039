"""Modelled instances: a prefill facet (queue, chunked prefill, the real prefix cache pool) and
a decode facet (continuous batching bounded by BS_max and KV memory). A PD instance carries
both and uses the one its role names, so a role flip needs no new object.

Prefill: FCFS. A step takes up to `chunk_tokens` tokens from the head of the queue, packing
several requests when `max_batch_requests` > 1. A piece of a request costs its increment of
the profile's curve, T(done + k) - T(done) (its first piece T(k)), so a request alone costs
exactly T_prefill(uncached); a step pays the fixed cost T(1) once however many requests start
in it. With the default of one request per step a request is one event. When a request starts,
the pool allocates its blocks (hit = the longest prefix every group restores); when it ends,
they are committed and pinned for transfer until the KV is delivered. With a disk tier below
the pool, the units of the hit promoted from disk are read at the tier's read rate before the
first piece (`load_s`), and a hit whose load would cost more than its recompute is capped to
its DRAM part (`scheduler.tiers`); demotions are written behind, off the request's path.
An instance that prefills d prompts at once (`PerfProfile.prefill_concurrency`: its
attention-DP ranks) runs d such steps side by side, one per lane, each over queued requests
no other lane is running; a request runs on one lane at a time and costs its own latency there.

Decode: the batch changes only at step boundaries. Between changes every member gains one token
per step of T_decode(batch, mean context); the facet schedules one event at the next leave (or
at the next boundary when a request can join), never one per token. Each member records its
segments (start, step, count), from which exact token times are rebuilt for the metrics.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from prfaas.kvcache.cache import HybridPrefixCache
from prfaas.kvcache.hashing import HashScheme
from prfaas.kvcache.ids import TransferId
from prfaas.kvcache.values import CacheRequest, OutOfPages
from prfaas.scheduler.decisions import RouteDecision
from prfaas.scheduler.tiers import allocate_weighed, promotion_s
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.core import EventLoop, EventPriority
from prfaas.sim.link import Flow
from prfaas.specs.perf import PerfProfile


@dataclass(slots=True)
class PrefillJob:
    request: SimRequest
    decision: RouteDecision
    uncached_tokens: int = 0
    computed_tokens: int = 0
    hit_tokens: int = 0
    has_pool_entry: bool = False
    transfer_id: TransferId | None = None
    flow: Flow | None = None
    start_s: float = 0.0
    cache_request: CacheRequest | None = None  # hashed once at arrival (None: no pool lookup)
    load_s: float = 0.0  # reading the hit's lower-tier units back before the first piece
    is_in_step: bool = False  # a lane is computing a piece of it


class PrefillHost(Protocol):
    def prefill_started(self, job: PrefillJob, estimate_s: float) -> None: ...

    def prefill_finished(self, job: PrefillJob) -> None: ...


class PrefillFacet:
    def __init__(
        self,
        loop: EventLoop,
        host: PrefillHost,
        profile: PerfProfile,
        *,
        pool: HybridPrefixCache | None,
        hash_scheme: HashScheme | None,
        chunk_tokens: int,
        max_batch_requests: int,
    ) -> None:
        self.loop, self.host, self.profile, self.pool = loop, host, profile, pool
        self.hash_scheme = hash_scheme
        self.chunk_tokens = chunk_tokens if max_batch_requests > 1 else 1 << 62
        self.max_batch_requests = max_batch_requests
        self.queue: deque[PrefillJob] = deque()
        self.num_lanes = profile.prefill_concurrency
        self.busy_lanes = 0
        self.busy_s = 0.0  # instance time busy: each lane's step counts 1 / num_lanes
        self._overhead_s = profile.prefill_s(1)

    @property
    def is_idle(self) -> bool:
        """Nothing running or queued. A job leaves the queue as it ends, before the host hears
        of it and before its lane is freed, so the queue alone says it: a role
        flip that waits for the last job (`SimInstance.settle_flip`, called from the host's
        `prefill_finished`) would otherwise never see the facet idle."""
        return not self.queue

    def enqueue(self, job: PrefillJob) -> None:
        self.queue.append(job)
        self._fill()

    def _fill(self) -> None:
        """Start a step on every free lane that finds work."""
        while self.busy_lanes < self.num_lanes and self._step():
            pass

    def _begin(self, job: PrefillJob) -> None:
        request = job.request
        hit = 0
        if self.pool is not None and job.cache_request is not None:
            allocation = allocate_weighed(self.pool, job.cache_request, self.profile)
            if not isinstance(allocation, OutOfPages):
                job.has_pool_entry = True
                hit = allocation.match.hit_tokens
                job.load_s = promotion_s(self.pool, allocation.num_promoted_pages)
        moved = job.decision.cache_move.tokens if job.decision.cache_move else 0
        job.hit_tokens = min(max(hit, moved), request.input_tokens - 1)
        job.uncached_tokens = request.input_tokens - job.hit_tokens
        job.start_s = self.loop.now_s
        self.host.prefill_started(job, self.profile.prefill_s(job.uncached_tokens) + job.load_s)

    def _piece_s(self, job: PrefillJob, take: int) -> float:
        done = job.computed_tokens
        if done == 0:
            return self.profile.prefill_s(take) + job.load_s
        return self.profile.prefill_s(done + take) - self.profile.prefill_s(done)

    def _step(self) -> bool:
        """One step on a free lane over the queued requests no lane is running; False when
        there are none."""
        budget, cost_s, starts = self.chunk_tokens, 0.0, 0
        pieces: list[tuple[PrefillJob, int]] = []
        for job in self.queue:
            if budget <= 0 or len(pieces) >= self.max_batch_requests:
                break
            if job.is_in_step:
                continue
            if job.computed_tokens == 0:
                self._begin(job)
                starts += 1
            take = min(job.uncached_tokens - job.computed_tokens, budget)
            cost_s += self._piece_s(job, take)
            pieces.append((job, take))
            job.is_in_step = True
            budget -= take
        if not pieces:
            return False
        cost_s -= self._overhead_s * max(0, starts - 1)
        self.busy_lanes += 1
        self.busy_s += cost_s / self.num_lanes
        self.loop.schedule(self.loop.now_s + cost_s, EventPriority.COMPLETION, self._end, pieces)
        return True

    def _end(self, pieces: list[tuple[PrefillJob, int]]) -> None:
        for job, take in pieces:
            job.is_in_step = False
            job.computed_tokens += take
            if job.computed_tokens >= job.uncached_tokens:
                self.queue.remove(job)
                if job.has_pool_entry and self.pool is not None:
                    rid = job.request.request_id
                    self.pool.commit(rid)
                    job.transfer_id = self.pool.begin_transfer(rid).transfer_id
                    self.pool.release(rid)
                self.host.prefill_finished(job)
        self.busy_lanes -= 1  # after the host heard: what it enqueues waits for this lane
        self._fill()


@dataclass(slots=True)
class DecodeSeq:
    request: SimRequest
    job: PrefillJob
    first_token_s: float
    kv_bytes: float
    tokens_left: int
    segments: list[tuple[float, float, int]] = field(default_factory=list)

    @property
    def context_tokens(self) -> int:
        return self.request.input_tokens + self.request.output_tokens - self.tokens_left


class DecodeHost(Protocol):
    def decode_finished(self, seq: DecodeSeq) -> None: ...


class DecodeFacet:
    def __init__(
        self,
        loop: EventLoop,
        host: DecodeHost,
        profile: PerfProfile,
        max_batch_size: int,
        kv_capacity_bytes: float,
    ) -> None:
        self.loop, self.host, self.profile = loop, host, profile
        self.max_batch_size = max_batch_size
        self.kv_capacity_bytes = kv_capacity_bytes
        self.kv_used_bytes = 0.0
        self.running: list[DecodeSeq] = []
        self.waiting: deque[DecodeSeq] = deque()
        self.anchor_s = 0.0
        self.step_s = 0.0
        self._version = 0
        self._join_pending = False
        self.batch_area = 0.0  # integral of batch size over time, for utilisation
        self._step_cache: dict[tuple[int, int], float] = {}
        self._context_sum = 0  # sum of the running members' context tokens (exact ints)

    @property
    def is_idle(self) -> bool:
        return not self.running and not self.waiting

    def arrive(self, seq: DecodeSeq) -> None:
        if seq.tokens_left <= 0:
            self.host.decode_finished(seq)
            return
        self.waiting.append(seq)
        if not self.running:
            self._boundary()
        elif self._can_admit() and not self._join_pending:
            elapsed_steps = math.ceil((self.loop.now_s - self.anchor_s) / self.step_s - 1e-9)
            boundary_s = self.anchor_s + max(0, elapsed_steps) * self.step_s
            self._join_pending = True
            self.loop.schedule(boundary_s, EventPriority.COMPLETION, self._on_event, self._version)

    def _can_admit(self) -> bool:
        if not self.waiting or len(self.running) >= self.max_batch_size:
            return False
        head = self.waiting[0]
        return not self.running or self.kv_used_bytes + head.kv_bytes <= self.kv_capacity_bytes

    def _on_event(self, version: int) -> None:
        if version == self._version:
            self._boundary()

    def _advance(self) -> None:
        now = self.loop.now_s
        if self.running and self.step_s > 0:
            steps = round((now - self.anchor_s) / self.step_s)
            self.batch_area += len(self.running) * (now - self.anchor_s)
            if steps > 0:
                segment = (self.anchor_s, self.step_s, steps)
                for seq in self.running:
                    seq.segments.append(segment)
                    seq.tokens_left -= steps
                self._context_sum += steps * len(self.running)
        self.anchor_s = now

    def _boundary(self) -> None:
        self._advance()
        self._join_pending = False
        finished = [s for s in self.running if s.tokens_left <= 0]
        if finished:
            self.running = [s for s in self.running if s.tokens_left > 0]
            for seq in finished:
                self.kv_used_bytes -= seq.kv_bytes
                self._context_sum -= seq.context_tokens
                self.host.decode_finished(seq)
        while self._can_admit():
            seq = self.waiting.popleft()
            self.kv_used_bytes += seq.kv_bytes
            self._context_sum += seq.context_tokens
            self.running.append(seq)
        self._version += 1
        if not self.running:
            return
        context = self._context_sum // len(self.running)
        key = (len(self.running), context >> 8)
        step_s = self._step_cache.get(key)
        if step_s is None:
            step_s = self.profile.decode_step_s(len(self.running), max(1, context))
            self._step_cache[key] = step_s
        self.step_s = step_s
        next_leave = min(s.tokens_left for s in self.running)
        self.loop.schedule(
            self.anchor_s + next_leave * step_s,
            EventPriority.COMPLETION,
            self._on_event,
            self._version,
        )
