"""The router's live view of the deployment: instances, their cache events, health, the link.

The router pulls every instance's `/state` each `poll_interval_s` (load, new cache events in
sequence, link telemetry). A changed `boot_id` means a restart: the instance is re-registered with
the global index, dropping what it held (stale entries of a restarted peer: llm-d PR #2187), and its
`restarts` count grows.
An instance that does not answer its poll, or whose call broke and then fails its health
`probe` too (`serve.router.attempts.judge`), is marked unhealthy: `is_accepting` is False in
the `ClusterView`, so the scheduler places nothing on it, and its cache entries leave the
index until it is back. A request's own error never marks an instance, and neither does the
router's own slowness (`is_own_failure`): a poll or probe that timed out while the router's
event loop was stalled (`overload.LoopWatch`) or that waited for a pooled connection proves
nothing about the instance. Polls and probes use an `InstanceClient` of their own
(`client`), so request traffic never starves them of connections.
An instance's own failures (5xx answers while it answers its polls: an engine that died) do
mark it, through its `FailureBreaker` (`serve.router.breaker`: `request_failed`,
`request_served`; failures while it is marked down are its unreachability, which the polls
track, and are not counted), and a request is never placed again on an instance that failed it
(`view(now_s, excluded)`).

Roles live here, not in the deployment file: a PD instance's role is what it last reported
(`/info`, `/state`) or what the router switched it to (`serve.router.rebalance`). An instance that
drains for a role flip (`is_draining`, or `is_reported_draining`: the instance says the
lease holder, maybe another replica, drains it) is not accepting either, nor a PrfaaS instance whose
kernel-shaped link is down (`is_link_up`: its `/state` says `link_up: false`, e.g. the link's
delay line died; long prompts then go to PD-P at once until it is back); `inflight` counts
the requests the router placed on it (prefill or decode stage) that have not finished that
stage.

Router replicas: each router process has its own `replica_id`, which it sends with every
prefill and decode call; each instance reports its calls in progress by replica
(`load_by_router` in `/state`), and every poll hands the other replicas' share to the
scheduler's ledger (`DispatchLedger.set_foreign`), so routing and admission weigh the whole
load on an instance, not only this router's. `inflight` stays this router's own count: it
is what a flip's drain waits for on top of the instance's calls in progress (requests this
router placed that have not yet called the instance).

`view(now_s)` builds the scheduler's read-only `ClusterView` (with `has_receive_room`: a
decode instance whose KV receive buffer was full at its last poll is passed over while
another has room); `hit_tokens` asks the global
KVCache index for every instance's restorable prefix of a prompt, hashed exactly as the
engines hash it (`hash_tokens(prompt[:-1])`, the last token is never a hit), and weighs the
part of it on an instance's disk by the time to read it back against recomputing it, with the
simulator's rule (`scheduler.tiers.weighed_hits`, the instance's published timing and disk
read rate).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prfaas.kvcache import (
    BlockRemoved,
    BlockStored,
    CacheEvent,
    EventStreamError,
    GlobalKVCacheIndex,
)
from prfaas.kvcache.ids import BlockHash, ClusterId, InstanceId
from prfaas.scheduler import ClusterView, DispatchLedger, InstanceView, LinkView, Role
from prfaas.scheduler.tiers import HitPricing, weighed_hits
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec
from prfaas.serve.errors import IncompatibleInstanceError
from prfaas.serve.profile import published_profile
from prfaas.serve.router.breaker import FailureBreaker
from prfaas.serve.router.instance_client import CallBroke, InstanceCallError, InstanceClient
from prfaas.serve.router.lease import replica_id
from prfaas.serve.router.overload import LoopWatch

log = logging.getLogger("prfaas.registry")
POLL_TIMEOUT_S = 2.0
PROBE_TRIES = 2
PROBE_TIMEOUT_S = 2.0
PROBE_SINCE = 2**62  # a /state that lists no cache events

ROLES = {
    InstanceRole.PRFAAS_PREFILL: Role.PRFAAS,
    InstanceRole.PD_PREFILL: Role.PD_PREFILL,
    InstanceRole.PD_DECODE: Role.PD_DECODE,
}


@dataclass(slots=True)
class LiveInstance:
    spec: InstanceSpec
    role: InstanceRole
    info: p.InstanceInfo | None = None
    is_healthy: bool = False
    next_seq: int = 0
    num_waiting: int = 0
    num_running: int = 0
    free_pages: int = 0
    links: tuple[p.LinkBody, ...] = ()
    is_draining: bool = False
    flip_to: InstanceRole | None = None
    inflight: int = 0
    active_calls: int = 0  # prefill + decode calls in progress, as the instance reports them
    prefill_busy_s: float = 0.0  # cumulative, as reported
    decode_slot_s: float = 0.0  # integral of running decodes / max_batch_size over polls
    last_poll_s: float | None = None
    role_epoch: int = 0  # bumped by every flip: a poll that started before it keeps our role
    restarts: int = 0  # boot_id changes seen: the instance process was restarted
    resyncs: int = 0  # times its cache entries were forgotten (`Registry.resync`)
    disk_tier: p.DiskTierBody | None = None  # its disk tier's counters, as last polled
    is_partial: bool = False  # the index missed some of its events since it registered
    has_receive_room: bool = True  # its KV receive buffer had a free page at the last poll
    breaker: FailureBreaker = field(default_factory=FailureBreaker)
    is_link_up: bool = True  # a PrfaaS instance's kernel link, as it last reported it
    is_reported_draining: bool = False  # drained for a flip by the lease holder (any replica)
    # Set when it is marked down (`Registry.mark_failed`), fresh once it registers again: a
    # call in flight to it waits on this too (`serve.router.flow`), so a call to an instance
    # gone silent (a cut WAN: no reset, no answer) ends when its polls fail, not at the timeout.
    went_down: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_accepting(self) -> bool:
        return (
            self.is_healthy
            and not self.is_draining
            and not self.is_reported_draining
            and self.is_link_up
            and not self.breaker.is_open(time.monotonic())
        )


class Registry:
    def __init__(
        self, deployment: Deployment, client: InstanceClient, watch: LoopWatch | None = None
    ) -> None:
        self.deployment = deployment
        self.instances = {s.name: LiveInstance(s, s.role) for s in deployment.instances}
        self.index: GlobalKVCacheIndex | None = None
        self._client = client
        self.watch = watch if watch is not None else LoopWatch()
        self.replica_id = replica_id()  # this router among replicas (serve.router.lease)
        self.ledger: DispatchLedger | None = None  # the scheduler's, once it is built

    # --- polling ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Poll forever; one bad poll is reported and never stops the loop."""
        while True:
            try:
                await self.poll_once()
            except Exception:
                traceback.print_exc()
            await asyncio.sleep(self.deployment.router.poll_interval_s)

    async def poll_once(self) -> None:
        await asyncio.gather(*(self._poll(i) for i in self.instances.values()))

    async def _poll(self, inst: LiveInstance) -> None:
        epoch = inst.role_epoch
        started_s = time.monotonic()
        try:
            state = await self._state(inst, inst.next_seq)
            if inst.info is None or state.boot_id != inst.info.boot_id or not inst.is_healthy:
                state = await self._register(inst, epoch)
        except (InstanceCallError, ValueError, IncompatibleInstanceError) as err:
            if self.is_own_failure(err, started_s):
                self.mark_failed(inst.name)
            return
        self._apply(inst, state, epoch)

    async def _register(self, inst: LiveInstance, epoch: int) -> p.InstanceState:
        info = await self._client.info(inst.spec.url)
        identity = info.cache.identity()
        if self.index is None:
            self.index = GlobalKVCacheIndex(identity)
        if identity != self.index.identity:
            raise IncompatibleInstanceError(f"{inst.name} hashes blocks differently")
        self.index.register_instance(InstanceId(inst.name), ClusterId(inst.spec.cluster), identity)
        if inst.info is not None and info.boot_id != inst.info.boot_id:
            inst.restarts += 1
            inst.breaker = FailureBreaker()  # a new process: its failures start again
        inst.info, inst.next_seq, inst.is_healthy = info, 0, True
        inst.is_partial = False
        if inst.went_down.is_set():
            inst.went_down = asyncio.Event()
        inst.last_poll_s = None
        if epoch == inst.role_epoch:
            inst.role = InstanceRole(info.role)
        return await self._state(inst, 0)

    def _apply(self, inst: LiveInstance, state: p.InstanceState, epoch: int) -> None:
        instance_id = InstanceId(inst.name)
        self._fold_events(inst, state.events)
        inst.next_seq = state.next_seq
        inst.num_waiting, inst.num_running = state.num_waiting, state.num_running
        inst.free_pages, inst.links = state.free_pages, tuple(state.links)
        buffer = state.resources  # no receive buffer (receive_pages 0): nothing to be full
        inst.has_receive_room = buffer.receive_pages == 0 or buffer.receive_pages_free > 0
        inst.is_link_up = state.link_up is not False
        inst.is_reported_draining = state.draining
        inst.disk_tier = state.disk_tier
        if state.role is not None and epoch == inst.role_epoch:
            inst.role = InstanceRole(state.role)
        now = time.monotonic()
        if inst.last_poll_s is not None and inst.role is InstanceRole.PD_DECODE:
            share = min(1.0, state.num_running / max(1, inst.spec.max_batch_size))
            inst.decode_slot_s += share * (now - inst.last_poll_s)
        inst.last_poll_s = now
        inst.prefill_busy_s = state.prefill_busy_s
        inst.active_calls = state.active_prefills + state.active_decodes
        if self.ledger is not None:
            others = [v for r, v in state.load_by_router.items() if r != self.replica_id]
            self.ledger.set_foreign(
                instance_id,
                sum(v.prefill_work_s for v in others),
                sum(v.decodes for v in others),
            )

    def _fold_events(self, inst: LiveInstance, rows: Sequence[p.CacheEventRow]) -> None:
        """Fold the events of `inst` this replica has not seen into the index, in order.

        A replica that missed events (the instance's log dropped them before this replica
        asked: it joined late, or was away longer than the log holds) cannot know what they
        stored or removed, so it resyncs: it forgets what it knew of `inst` (`resync`) and
        learns again from the events it has. A stream the index cannot fold (a removal of a
        block it does not hold) resyncs the same way, rather than failing every poll after."""
        assert self.index is not None
        new = [row for row in rows if row[0] >= inst.next_seq]
        if new and new[0][0] > inst.next_seq:
            self.resync(inst, f"events {inst.next_seq} to {new[0][0] - 1} were lost")
        instance_id = InstanceId(inst.name)
        events: list[CacheEvent] = [
            (BlockStored if stored else BlockRemoved)(instance_id, group, BlockHash(h), medium)
            for _, stored, group, h, medium in new
        ]
        if not inst.is_partial:
            try:
                self.index.apply(events)
                return
            except EventStreamError as err:
                self.resync(inst, str(err))
        for event in events:  # after a resync: what it missed cannot be folded, and is skipped
            with contextlib.suppress(EventStreamError):
                self.index.apply((event,))

    def resync(self, inst: LiveInstance, why: str) -> None:
        """Forget what the index holds for `inst`: from now on it knows only what later
        events store (a block it missed is a hit not counted until it is stored again,
        never a block claimed that the instance dropped); events about blocks it missed are
        then expected and skipped (`is_partial`), until the instance registers again."""
        assert self.index is not None and inst.info is not None
        log.warning("resync of %s's cache entries: %s", inst.name, why)
        identity = inst.info.cache.identity()
        self.index.register_instance(InstanceId(inst.name), ClusterId(inst.spec.cluster), identity)
        inst.is_partial = True
        inst.resyncs += 1

    async def _state(self, inst: LiveInstance, since: int) -> p.InstanceState:
        return await self._client.state(inst.spec.url, since, timeout_s=POLL_TIMEOUT_S)

    async def probe(self, inst: LiveInstance) -> bool:
        """Whether `inst` answers a health probe now (GET /state on a fresh connection, twice
        at most): what decides, after a call to it broke, that the instance is down rather
        than that one connection was stale. A probe the router itself was too slow to
        finish (`is_own_failure`) does not show the instance down: True."""
        for _ in range(PROBE_TRIES):
            started_s = time.monotonic()
            try:
                await self._client.state(
                    inst.spec.url, PROBE_SINCE, timeout_s=PROBE_TIMEOUT_S, fresh_connection=True
                )
            except CallBroke as err:
                if not self.is_own_failure(err, started_s):
                    return True
                continue
            except (InstanceCallError, ValueError):
                continue
            return True
        return False

    def request_failed(self, name: str) -> None:
        """A request failed on `name` by the instance's own fault (`serve.router.breaker`).
        Not counted while `name` is marked down (its polls fail: unreachable, e.g. behind a
        cut WAN): the calls that were in flight when it went silent fail then, and counting
        them would keep it out for a cooldown after its polls bring it back."""
        inst = self.instances[name]
        if inst.is_healthy:
            inst.breaker.failed(time.monotonic())

    def request_served(self, *names: str) -> None:
        """A request completed on these instances: their failure counts start again."""
        for name in names:
            self.instances[name].breaker.succeeded()

    def is_own_failure(self, err: Exception, started_s: float) -> bool:
        """Whether a call to an instance that began at `started_s` (monotonic) and failed with
        `err` shows the instance failing: a refusal, a reset, an error status or a bad body
        do; a wait for one of the router's pooled connections does not, nor a timeout while
        the router's own loop was stalled (it could not have read the answer in time)."""
        if isinstance(err, CallBroke) and err.is_pool_wait:
            return False
        if isinstance(err, CallBroke) and err.is_timeout:
            return not self.watch.stalled_since(started_s)
        return True

    def mark_failed(self, name: str) -> None:
        """Place nothing on it and forget its cache until it answers again."""
        inst = self.instances[name]
        inst.is_healthy = False
        inst.went_down.set()
        if self.index is not None:
            with contextlib.suppress(Exception):
                self.index.remove_instance(InstanceId(name))

    # --- what the scheduler sees -------------------------------------------------------------

    def healthy(self, role: InstanceRole | None = None) -> list[LiveInstance]:
        return [
            i
            for i in self.instances.values()
            if i.is_healthy and i.info is not None and (role is None or i.role is role)
        ]

    def view(self, now_s: float, excluded: frozenset[str] = frozenset()) -> ClusterView:
        """The scheduler's view; instances in `excluded` (those that failed the request
        being placed) are not accepting in it."""
        views = tuple(
            InstanceView(
                InstanceId(i.name),
                ClusterId(i.spec.cluster),
                ROLES[i.role],
                is_accepting=i.is_accepting and i.name not in excluded,
                kv_capacity_bytes=float(i.info.kv_capacity_bytes if i.info else 0),
                max_batch_size=i.spec.max_batch_size,
                has_receive_room=i.has_receive_room,
            )
            for i in self.instances.values()
        )
        return ClusterView(now_s, views, self.link_view())

    def links_down(self) -> list[str]:
        """The healthy PrfaaS instances whose link is down now."""
        return [i.name for i in self.healthy(InstanceRole.PRFAAS_PREFILL) if not i.is_link_up]

    def link_view(self) -> LinkView:
        """The inter-cluster link: the PrfaaS instances' sender telemetry, summed."""
        links = [link for i in self.healthy(InstanceRole.PRFAAS_PREFILL) for link in i.links]
        rtts = [link.rtt_s for link in links if link.rtt_s is not None]
        return LinkView(
            capacity_bytes_per_s=self.deployment.link.rate_bytes_per_s,
            egress_bytes_per_s=sum(link.egress_bytes_per_s for link in links),
            bytes_waiting=float(sum(link.bytes_waiting for link in links)),
            rtt_s=sum(rtts) / len(rtts) if rtts else 0.0,
        )

    def hit_tokens(self, token_ids: Sequence[int]) -> dict[InstanceId, int]:
        if self.index is None or len(token_ids) < 2:
            return {}
        scheme = self.index.identity.scheme
        hashes = scheme.hash_tokens(list(token_ids[:-1]))
        max_hit = (len(token_ids) - 1) // scheme.block_tokens
        match = self.index.match(hashes, max_hit)
        return weighed_hits(match, scheme.block_tokens, len(token_ids), self._pricing)

    def _pricing(self, instance_id: InstanceId) -> HitPricing:
        """What a hit on `instance_id`'s disk costs: its published prefill timing and the
        read rate of its disk tier (`InstanceInfo.disk_read_bytes_per_s`)."""
        info = self.instances[instance_id].info
        assert info is not None  # the index holds only registered instances
        return HitPricing(published_profile(info.timing, info), info.disk_read_bytes_per_s)

    def attention_tokens(self, name: str, token_ids: Sequence[int]) -> int:
        """Prompt tokens whose attention KV instance `name` holds (block aligned, the last
        token never counted), as its cache events have told the index."""
        instance_id = InstanceId(name)
        if self.index is None or instance_id not in self.index.instances or len(token_ids) < 2:
            return 0
        scheme = self.index.identity.scheme
        hashes = scheme.hash_tokens(list(token_ids[:-1]))
        return self.index.attention_blocks(instance_id, hashes) * scheme.block_tokens

    def indexed_blocks(self, name: str) -> int:
        """Block entries (all groups) the global index holds for instance `name`."""
        instance_id = InstanceId(name)
        if self.index is None or instance_id not in self.index.instances:
            return 0
        return self.index.num_entries(instance_id)

    def timing(self, roles: Sequence[InstanceRole]) -> p.TimingBody | None:
        """The prefill timing published by a healthy instance of the first of `roles` present."""
        for role in roles:
            for inst in self.healthy(role):
                if inst.info is not None and inst.info.timing is not None:
                    return inst.info.timing
        return None

    def vocab_size(self) -> int | None:
        """The served vocabulary's size (None while no instance says: the vLLM backend)."""
        sizes = [i.info.vocab_size for i in self.healthy() if i.info and i.info.vocab_size]
        return min(sizes, default=None)

    def computes_logprobs(self) -> bool:
        """Whether every instance's engine reports token logprobs (one backend per
        deployment: torch does, emulated and vllm do not)."""
        infos = [i.info for i in self.healthy() if i.info is not None]
        return bool(infos) and all(info.capabilities.computes_logprobs for info in infos)

    def chat_runs_to_context(self) -> bool:
        """Whether the instances' engines run a chat without max_tokens to the end of the
        context (`InstanceInfo.capabilities`: the vllm backend's, as `vllm serve`)."""
        infos = [i.info for i in self.healthy() if i.info is not None]
        return bool(infos) and all(info.capabilities.chat_runs_to_context for info in infos)

    def byte_tokenizer(self) -> bool:
        """Whether every instance's prompts are the byte tokenizer's
        (`capabilities.byte_tokenizer`): the router then encodes them itself."""
        infos = [i.info for i in self.healthy() if i.info is not None]
        return bool(infos) and all(info.capabilities.byte_tokenizer for info in infos)

    def agreed(self, capability: Callable[[p.CapabilitiesBody], bool]) -> bool | None:
        """What every healthy instance declares of `capability` (`/info` capabilities); None
        when they differ, False while none has said."""
        said = {capability(i.info.capabilities) for i in self.healthy() if i.info is not None}
        return None if len(said) > 1 else said == {True}

    def max_context_tokens(self) -> int | None:
        """The served model's context, as every instance that registered reported it (it is
        the model's, so an instance down now still tells it); None until one has: an unknown
        context is not a context of 0."""
        infos = [i.info for i in self.instances.values() if i.info is not None]
        return min((info.max_context_tokens for info in infos), default=None)
