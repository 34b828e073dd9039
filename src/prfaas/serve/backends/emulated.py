"""The `emulated` instance backend: a catalog model's timing and KV bytes, no model compute.

It lets one small machine run a many-instance deployment of a 1T-model scenario with real
processes, sockets, router and hybrid-pool bookkeeping (docs/architecture.md):

    prefill  match the prompt in the pool (real `HybridPrefixCache`, bookkeeping only; with
             `disk_tier`, a hit's units on disk are read back first: `emulated_disk`), sleep
             profile.prefill_s(uncached) x time_factor in num_layers equal steps, and after each
             step hand over that layer's slice; the slices of one request add up to
             round(profile.cache_bytes(prompt) x byte_factor) bytes, split over layers by the
             model's own per-group bytes (attention KV grows with the prompt, states do not);
             up to profile.prefill_concurrency prefills at once (an attention-DP instance's
             ranks, each prefilling one prompt at its latency: docs/planner.md), first come
             first served, as the simulator's lanes
    decode   continuous batching: admit what the pool and `max_batch_size` allow, then each
             step sleeps profile.decode_step_s(batch, mean context) x time_factor and emits one
             token per running request

Worked bytes (prfaas-1t, h200 x8, 27K-token prompt, byte_factor 1/256): the profile says
656 MB of KV and state; 2.56 MB cross the link in 60 slices (15 MLA layers of prompt KV,
45 KDA layers of state). Tokens are deterministic: the byte tokenizer's ids (<bos> + UTF-8),
and outputs drawn from lowercase letters and spaces by a hash of the prompt, so the same
prompt always gives the same text (with `emulation.output_text`: that text's bytes, repeated).
Runs on the instance's event loop (asyncio sleeps, no thread, no torch import); `start()` once
the loop runs, `stop()` at shutdown.

Sleeps aim at absolute deadlines on the loop's clock (`_sleep_until`), so the event loop's
wake-up lateness does not add up: a prefill's 60 layer steps end at start + prefill time
however late each wake-up was (relative sleeps overslept ~1 ms a step on an idle 2-core
host, 0.06-0.1 s a prefill, more under load: docs/validation.md), and consecutive decode
steps follow a step clock instead of drifting by each step's bookkeeping.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from prfaas.kvcache import (
    CacheConfig,
    CacheRequest,
    HybridPrefixCache,
    InstanceId,
    KvSlice,
    OutOfPages,
    RequestId,
)
from prfaas.serve import protocol as p
from prfaas.serve.backends.emulated_disk import EmulatedDisk
from prfaas.serve.backends.event_log import EventLog, SeqEvent
from prfaas.serve.backends.interface import (
    BackendInfo,
    Capabilities,
    Finished,
    Item,
    PrefillDone,
    Token,
    transcript_ids,
)
from prfaas.serve.config.deployment import Deployment, InstanceSpec
from prfaas.serve.errors import BadRequestError, InstanceFailedError
from prfaas.serve.profile import PrefillTiming
from prfaas.specs.catalog import get_model
from prfaas.specs.model import ModelSpec
from prfaas.specs.perf import PerfProfile
from prfaas.specs.timing import TimingChoice, time_instance
from prfaas.transfer import identity_for

BOS_ID = p.BYTE_BOS_ID
VOCAB_SIZE = 259  # the byte tokenizer's (engine.tokenizer): bytes, <pad>, <bos>, <eos>
OUTPUT_ALPHABET = b"abcdefghijklmnopqrstuvwxyz     "
IDLE_WAIT_S = 0.05

log = logging.getLogger("prfaas.emulated")


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline_s: float) -> None:
    """Sleep until the loop's clock reads `deadline_s`; when it already has, go on without
    yielding. For a prefill's layers (a bounded number): a layer that is due is handed over
    now, not a loop turn later, so due layers leave together (their small KV frames in one
    write). The decode loop yields every step instead (`_decode_step`)."""
    wait_s = deadline_s - loop.time()
    if wait_s > 0:
        await asyncio.sleep(wait_s)


def layer_bytes(model: ModelSpec, num_tokens: int, total_bytes: int) -> list[tuple[int, int]]:
    """(group index, bytes) per layer, in layer order, adding up to exactly `total_bytes`.

    Each mixer group's share is its own cache bytes at `num_tokens` (KV per token x tokens,
    plus its bounded state), spread evenly over its layers; the rounding rest goes last."""
    weights: list[tuple[int, float]] = []
    for index, group in enumerate(model.mixers):
        group_bytes = group.kv_bytes_per_token() * num_tokens + group.state_bytes(num_tokens)
        weights += [(index, group_bytes / group.num_layers)] * group.num_layers
    whole = sum(w for _, w in weights) or 1.0
    sizes = [(g, int(total_bytes * w / whole)) for g, w in weights]
    rest = total_bytes - sum(n for _, n in sizes)
    last_group, last_bytes = sizes[-1]
    sizes[-1] = (last_group, last_bytes + rest)
    return sizes


def instance_profile(deployment: Deployment, spec: InstanceSpec) -> PerfProfile:
    """What times the emulated instance `spec`: its chip (the file's `chips:`, else the
    catalog's) by the file's timing source (default: the roofline, the catalog's measured
    points where it has them) at the instance's split, as the plan timed it
    (`specs.timing.time_instance`, the planner's entry point). A source that cannot time it
    (aiconfigurator not installed, a chip it has no data for) gives the roofline and one
    logged line, as the planner prints one."""
    split = deployment.split_of(spec)
    assert split is not None  # an emulated deployment's model is a catalog model (validated)
    choice = spec.timing.choice() if spec.timing is not None else TimingChoice()
    timed = time_instance(get_model(deployment.model), deployment.chip_of(spec), split, choice)
    if timed.fallback is not None:
        log.warning("instance %s: %s", spec.name, timed.fallback)
    return timed.profile


def output_token(prompt: Sequence[int], index: int, script: bytes = b"") -> int:
    """The `index`-th generated token for `prompt`: a pure function of both. With a
    `script` (`emulation.output_text` as UTF-8) the tokens are its bytes, repeated."""
    if script:
        return script[index % len(script)]
    seed = zlib.crc32(b"".join(t.to_bytes(4, "little") for t in prompt[-64:]), len(prompt))
    mixed = zlib.crc32(index.to_bytes(4, "little"), seed)
    return OUTPUT_ALPHABET[mixed % len(OUTPUT_ALPHABET)]


def _no_logprobs(sampling: p.Sampling) -> None:
    """Logprobs are refused, not made up: an emulated instance computes no logits."""
    if sampling.logprobs is not None:
        raise BadRequestError("logprobs: the emulated backend computes no logits", param="logprobs")


@dataclass(slots=True)
class _Prefill:
    request_id: str
    tokens: list[int]
    out: asyncio.Queue[Item]


@dataclass(slots=True)
class _Decode:
    body: p.DecodeRequest
    out: asyncio.Queue[Item]
    is_admitted: bool = False
    generated: list[int] = field(default_factory=list)


class EmulatedBackend:
    """The `emulated` `InstanceBackend` (see the module docstring)."""

    def __init__(self, deployment: Deployment, spec: InstanceSpec) -> None:
        self.model = get_model(deployment.model)
        self.profile = instance_profile(deployment, spec)
        self.emulation = deployment.emulation
        self.script = (self.emulation.output_text or "").encode()
        self.name = spec.name
        self.max_batch_size = spec.max_batch_size
        self.disk = EmulatedDisk(spec.disk_tier, self.emulation, self.profile)
        config = CacheConfig.for_model(
            self.model,
            block_tokens=deployment.block_tokens,
            capacity_bytes=spec.capacity_mib * 2**20,
            seed=deployment.hash_seed,
            lower_tier=self.disk.tier,
        )
        self.pool = HybridPrefixCache(config, InstanceId(spec.name))
        self.info = BackendInfo(
            max_context_tokens=self.emulation.max_context_tokens,
            kv_bytes_per_token=self.model.kv_bytes_per_token() * self.emulation.byte_factor,
            kv_capacity_bytes=config.capacity_bytes,
            cache=config.identity,
            peer=identity_for(self.model, deployment.block_tokens, deployment.hash_seed),
            timing=PrefillTiming.sampled(
                f"{self.profile.source} x time_factor {self.emulation.time_factor}",
                self.emulation.max_context_tokens,
                lambda n: self.profile.prefill_s(n) * self.emulation.time_factor,
                self.scaled_kv_bytes,
                self.profile.prefill_concurrency,
            ),
            capabilities=Capabilities(
                has_disk_tier=self.disk.tier is not None,
                byte_tokenizer=True,
                prompt_in_kv_stream=True,
            ),
            vocab_size=VOCAB_SIZE,
            disk_read_bytes_per_s=self.disk.published_read_bytes_per_s,
        )
        self.num_waiting = 0
        self.num_running = 0
        self.free_pages = self.pool.pool.num_free_pages
        self.held_pages = 0
        self.disk_tier = self.pool.tier_counters if self.disk.tier is not None else None
        self._prefills: asyncio.Queue[_Prefill] | None = None
        self._prefill_ids: set[str] = set()  # queued or running; `cancel` takes one out
        self._decodes: dict[str, _Decode] = {}
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._events = EventLog()
        self._prefilling: set[str] = set()  # the requests whose prefills run (one per lane)
        self._step_due_s: float | None = None  # when the decode step in progress ends

    # --- lifecycle and the small things --------------------------------------------------

    def start(self) -> None:
        self._prefills = asyncio.Queue()
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        lanes = self.profile.prefill_concurrency  # an attention-DP instance: one per rank
        self._tasks = [
            *(loop.create_task(self._prefill_loop()) for _ in range(lanes)),
            loop.create_task(self._decode_loop()),
        ]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def _check_alive(self) -> None:
        """502 when this engine is dead (`emulation.dead_engines`: fault injection), as a
        dead vLLM child answers: the instance's shell stays up and answers `/state`."""
        if self.name in self.emulation.dead_engines:
            raise InstanceFailedError(f"the engine of {self.name} is dead (emulation.dead_engines)")

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        self._check_alive()
        if not text:
            raise BadRequestError("the prompt is empty")
        return p.byte_prompt_ids(text, add_special_tokens=add_special_tokens)

    def encode_chat(self, chat: p.ChatPrompt) -> list[int]:
        return transcript_ids(self, chat)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return p.byte_text(token_ids)

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]:
        return self._events.since(seq)

    def scaled_kv_bytes(self, num_tokens: int) -> int:
        """What one prefill of `num_tokens` ships: the profile's cache bytes x byte_factor."""
        return round(self.profile.cache_bytes(num_tokens) * self.emulation.byte_factor)

    # --- prefill -------------------------------------------------------------------------

    def prefill(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefillRequest
    ) -> asyncio.Queue[Item]:
        """Queue the prefill; it ships the whole prompt's scaled bytes (`from_token` is not
        honoured: it does not `reports_cached_prefix`, so the router sends none)."""
        self._check_alive()
        _no_logprobs(body.sampling)
        self._check_fits(body.token_ids, body.sampling.max_tokens)
        out: asyncio.Queue[Item] = asyncio.Queue()
        assert self._prefills is not None, "start() first"
        self._prefills.put_nowait(_Prefill(body.request_id, body.token_ids, out))
        self._prefill_ids.add(body.request_id)
        self._publish()
        return out

    async def _prefill_loop(self) -> None:
        assert self._prefills is not None
        while True:
            job = await self._prefills.get()
            if job.request_id not in self._prefill_ids:
                continue  # cancelled while it queued
            self._prefilling.add(job.request_id)
            self._publish()  # running now, not waiting
            try:
                await self._prefill(job)
            except Exception as err:
                job.out.put_nowait(err)
            finally:
                self._prefill_ids.discard(job.request_id)
                self._prefilling.discard(job.request_id)
                self._publish()

    async def _prefill(self, job: _Prefill) -> None:
        n = len(job.tokens)
        request = self._request(job.request_id, job.tokens, 0, imported=False)
        allocation, load_s = self.disk.allocate(self.pool, request)
        if isinstance(allocation, OutOfPages):
            job.out.put_nowait(PrefillDone(None, 0))
            return
        hit = allocation.match.hit_tokens
        rid = RequestId(job.request_id)
        try:
            sizes = layer_bytes(self.model, n, self.scaled_kv_bytes(n))
            step_s = self.profile.prefill_s(n - hit) * self.emulation.time_factor / len(sizes)
            loop = asyncio.get_running_loop()
            started_s = loop.time() + load_s  # the hit's units read back from disk first
            for layer, (group, nbytes) in enumerate(sizes):
                await _sleep_until(loop, started_s + (layer + 1) * step_s)
                if job.request_id not in self._prefill_ids:
                    return  # cancelled: its pages go back, nothing is cached
                job.out.put_nowait(KvSlice(layer, group, 0, n, "uint8", (nbytes,), bytes(nbytes)))
            self.pool.commit(rid)
        finally:
            self.pool.release(rid)
        job.out.put_nowait(PrefillDone(output_token(job.tokens, 0, self.script), hit))

    # --- decode --------------------------------------------------------------------------

    def decode(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.DecodeRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Queue[Item]:
        self._check_alive()
        _no_logprobs(body.sampling)
        self._check_fits(body.token_ids, body.sampling.max_tokens)
        out: asyncio.Queue[Item] = asyncio.Queue()
        self._decodes[body.request_id] = _Decode(body, out)
        assert self._wake is not None, "start() first"
        self._wake.set()
        self._publish()
        return out

    def cancel(self, request_id: str) -> None:
        """Drop the request's prefill (queued: skipped; running: stopped at its next layer)
        and its decode (its slot and pages freed)."""
        self._prefill_ids.discard(request_id)
        job = self._decodes.pop(request_id, None)
        if job is not None and job.is_admitted:
            self.pool.release(RequestId(request_id))
        self._publish()

    async def _decode_loop(self) -> None:
        assert self._wake is not None
        while True:
            if not self._decodes:
                self._step_due_s = None  # the step clock restarts with the next request
                self._wake.clear()
                await self._wake.wait()
            try:
                await self._decode_step()
            except Exception as err:  # a failed step fails every request in the batch
                for rid, job in list(self._decodes.items()):
                    job.out.put_nowait(err)
                    self.cancel(rid)

    async def _decode_step(self) -> None:
        self._admit()
        self._publish()
        running = [job for job in self._decodes.values() if job.is_admitted]
        if not running:
            self._step_due_s = None
            await asyncio.sleep(IDLE_WAIT_S)  # waiting for pages nobody frees yet
            return
        context = sum(len(j.body.token_ids) + len(j.generated) for j in running)
        step_s = self.profile.decode_step_s(len(running), context // len(running))
        step_s *= self.emulation.time_factor
        loop = asyncio.get_running_loop()
        # Back to back steps follow the step clock; after an idle gap (or when more than a
        # step behind) the clock restarts now, so a late loop never emits a burst of tokens.
        now_s, due_s = loop.time(), self._step_due_s
        start_s = due_s if due_s is not None and now_s - due_s < step_s else now_s
        self._step_due_s = start_s + step_s
        # A loop turn every step, even when it is due: a long generation never holds the loop.
        await asyncio.sleep(max(0.0, self._step_due_s - loop.time()))
        for job in running:
            if job.body.request_id in self._decodes:
                token = output_token(job.body.token_ids, len(job.generated), self.script)
                self._emit(job, token)
        self._publish()

    def _admit(self) -> None:
        num_running = sum(1 for j in self._decodes.values() if j.is_admitted)
        for job in list(self._decodes.values()):
            if job.is_admitted:
                continue
            if num_running >= self.max_batch_size:
                return
            body = job.body
            request = self._request(
                body.request_id, body.token_ids, body.sampling.max_tokens, imported=True
            )
            if isinstance(self.pool.allocate(request), OutOfPages):
                return
            job.is_admitted = True
            num_running += 1
            self._emit(job, body.first_token)

    def _emit(self, job: _Decode, token: int) -> None:
        job.generated.append(token)
        job.out.put_nowait(Token(token))
        text = self.detokenize(job.generated)
        reason: str | None = None
        for stop in job.body.sampling.stop:
            cut = text.find(stop)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        if reason is None and len(job.generated) >= job.body.sampling.max_tokens:
            reason = "length"
        if reason is None:
            return
        rid = job.body.request_id
        self._decodes.pop(rid, None)
        self.pool.release(RequestId(rid))
        job.out.put_nowait(Finished(len(job.body.token_ids), tuple(job.generated), text, reason))

    # --- pool bookkeeping ----------------------------------------------------------------

    def _request(
        self, request_id: str, tokens: Sequence[int], reserved_tokens: int, *, imported: bool
    ) -> CacheRequest:
        """As the torch engine asks its pool: prefix hits stop one token short (the last one
        is always computed); an import restores nothing and takes no snapshots."""
        block = self.pool.config.layout.block_tokens
        return CacheRequest(
            RequestId(request_id),
            self.pool.config.hash_scheme.hash_tokens(list(tokens[:-1])),
            len(tokens) + reserved_tokens,
            max_hit_blocks=0 if imported else (len(tokens) - 1) // block,
            takes_snapshots=not imported,
        )

    def _check_fits(self, tokens: Sequence[int], max_tokens: int) -> None:
        if len(tokens) + max_tokens > self.info.max_context_tokens:
            raise BadRequestError(
                f"prompt of {len(tokens)} tokens + max_tokens {max_tokens} exceeds the "
                f"model's context of {self.info.max_context_tokens} tokens"
            )
        plan = self.pool.plan(self._request("probe", tokens, max_tokens, imported=False))
        if plan.num_pages > self.pool.config.num_pages:
            raise BadRequestError(
                f"request needs {plan.num_pages} pages, the pool has {self.pool.config.num_pages}"
            )

    def _publish(self) -> None:
        self._events.extend(self.pool.take_events())
        queued = len(self._prefill_ids - self._prefilling)  # not the cancelled ones
        admitted = sum(1 for j in self._decodes.values() if j.is_admitted)
        self.num_waiting = queued + len(self._decodes) - admitted
        self.num_running = admitted + len(self._prefilling)
        pool = self.pool.pool
        self.free_pages = pool.num_free_pages
        self.held_pages = pool.num_pages - pool.num_free_pages - pool.num_evictable_pages
