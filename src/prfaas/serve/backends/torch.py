"""The `torch` backend: `EngineWorker`, the one thread that owns an instance's `Engine`.

The asyncio side sends commands (closures run on the engine thread, in order); results come
back through `loop.call_soon_threadsafe`, so the event loop never blocks on a forward pass:

    asyncio handlers ──commands──► engine thread: run commands, engine.step(), drain pool events
                     ◄──items────  KvSlice ... PrefillDone    (prefill, layer by layer)
                     ◄──items────  Token ... Finished         (decode, token by token)

The engine's tokens, completions and errors are translated into `serve.backends.interface`'s
torch-free items here (its KV records already are one: `prfaas.kvcache.KvSlice`), so
`instance` runs any backend (`TorchBackend` is this module's `InstanceBackend`).
Lifecycle: `start()` after the event loop runs, `stop()` at shutdown (joins the thread).
Cache events from the pool go into its `EventLog`; the router pulls them (`events_since`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from prfaas.engine import (
    BadRequestError,
    Completion,
    Engine,
    EngineConfig,
    ExportedPrefill,
    PrefixExport,
    PrefixRecord,
    SamplingParams,
    TokenEvent,
    load_model,
)
from prfaas.engine.disk_tier import DiskTierConfig
from prfaas.engine.sampling import TokenLogprob
from prfaas.engine.tokenizer import ByteTokenizer, Tokenizer
from prfaas.kvcache import GroupKind, KvSlice
from prfaas.serve import errors
from prfaas.serve import protocol as p
from prfaas.serve.backends.event_log import EventLog, SeqEvent
from prfaas.serve.backends.interface import (
    BackendInfo,
    Capabilities,
    Finished,
    Item,
    PrefillDone,
    PrefixShipment,
    Token,
    transcript_ids,
)
from prfaas.serve.config.deployment import Deployment, DiskTierSpec, InstanceSpec
from prfaas.transfer import identity_for

IDLE_WAIT_S = 0.05

T = TypeVar("T")
Sink = Callable[[Any], None]  # takes the engine's items; hands `serve.backends.interface` items on
EngineItem = KvSlice | TokenEvent | Completion


def logprob_body(tokenizer: Tokenizer, logprob: TokenLogprob | None) -> p.Logprob | None:
    """The engine's `TokenLogprob` with every token named as text and bytes."""
    if logprob is None:
        return None

    def top(token_id: int, value: float) -> p.TopLogprob:
        text, raw = tokenizer.token_piece(token_id)
        return p.TopLogprob(token_id=token_id, token=text, bytes=list(raw), logprob=value)

    chosen = top(logprob.token_id, logprob.logprob)
    return p.Logprob(**chosen.model_dump(), top=[top(i, v) for i, v in logprob.top])


def _item(item: EngineItem | BaseException, tokenizer: Tokenizer) -> Item:
    """The engine's record, token or completion as a `serve.backends.interface` item."""
    if isinstance(item, KvSlice):
        return item
    if isinstance(item, TokenEvent):
        return Token(item.token_id, logprob_body(tokenizer, item.logprob))
    if isinstance(item, Completion):
        return Finished(item.num_prompt_tokens, item.token_ids, item.text, item.finish_reason.value)
    if isinstance(item, BadRequestError):
        return errors.BadRequestError(str(item))
    return item


def sampling_params(s: p.Sampling) -> SamplingParams:
    """The engine's parameters; what it refuses is the request's 400, not a worker error."""
    try:
        return SamplingParams(
            max_tokens=s.max_tokens,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            seed=s.seed,
            stop=tuple(s.stop),
            ignore_eos=s.ignore_eos,
            logprobs=s.logprobs,
        )
    except BadRequestError as err:
        raise errors.BadRequestError(str(err)) from None


class EngineWorker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._commands: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._decoding: dict[str, Sink] = {}
        self._lock = threading.Lock()
        self._events = EventLog()
        self.num_waiting = 0
        self.num_running = 0
        self.free_pages = 0
        self.held_pages = 0
        has_tier = engine.paged.config.lower_tier is not None
        self.disk_tier = engine.paged.pool.tier_counters if has_tier else None
        self._queued_exports: set[str] = set()  # under `_lock`; `cancel` takes one out

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    # --- commands (called from the event loop) ---------------------------------------------

    def prefill(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefillRequest
    ) -> asyncio.Queue[Item]:
        """Prefill on the engine thread; slices arrive as layers finish, then `PrefillDone`.
        Attention KV is exported from `body.from_token` on (what the decode instance lacks)."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        sink = _threadsafe(loop, out, self.engine.model.tokenizer)
        params = sampling_params(body.sampling)
        request_id, tokens, from_token = body.request_id, body.token_ids, body.from_token

        with self._lock:
            self._queued_exports.add(request_id)

        def command() -> None:
            with self._lock:
                if request_id not in self._queued_exports:
                    return  # cancelled before the engine reached it
                self._queued_exports.discard(request_id)
            try:
                probe = self.engine.paged.request("probe", tokens, 0, imported=False)
                hit = self.engine.paged.pool.match(probe).hit_tokens
                exported = self.engine.export_prefill(
                    request_id, tokens, params, from_token=from_token, on_layer=sink
                )
                if exported is None:
                    sink(PrefillDone(None, hit))
                    return
                first = logprob_body(self.engine.model.tokenizer, exported.first_logprob)
                sink(PrefillDone(exported.first_token, hit, first))
            except Exception as err:
                sink(err)

        self._commands.put(command)
        return out

    def cached_prefix_tokens(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int]
    ) -> asyncio.Future[int]:
        return self._call(loop, lambda: self.engine.cached_prefix_tokens(tokens))

    def decode(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.DecodeRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Queue[Item]:
        """Join an imported request to the batch; tokens arrive, then it is `Finished`."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        sink = _threadsafe(loop, out, self.engine.model.tokenizer)
        params = sampling_params(body.sampling)
        exported = ExportedPrefill(
            body.request_id, tuple(body.token_ids), body.first_token, tuple(slices)
        )

        def command() -> None:
            try:
                self.engine.submit_import(exported, params, sink)
                self._decoding[exported.request_id] = sink
            except Exception as err:
                sink(err)

        self._commands.put(command)
        return out

    def export_prefix(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefixSendRequest
    ) -> asyncio.Future[PrefixShipment]:
        """The pool's restorable prefix of the prompt (<= max_tokens) as one slice per group
        (`serve.backends.interface.PrefixMover`); no tokens when the pool holds none."""

        def shipment() -> PrefixShipment:
            export = self.engine.export_prefix(body.token_ids, body.max_tokens)
            if export is None:
                return PrefixShipment(0)
            return PrefixShipment(len(export.tokens), _prefix_slices(export))

        return self._call(loop, shipment)

    def import_prefix(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.PrefixImportRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Future[int]:
        """Insert a moved prefix into the pool; the tokens restorable now (0: no room)."""
        groups = self.engine.paged.config.layout.groups
        records = tuple(
            PrefixRecord(
                s.group_index,
                groups[s.group_index].kind is GroupKind.ATTENTION,
                s.shape[0] if s.shape else 0,
                s.data,
            )
            for s in slices
            if 0 <= s.group_index < len(groups)
        )
        block = self.engine.paged.block_tokens
        tokens = body.token_ids
        export = PrefixExport(tuple(tokens), len(tokens) // block, records)
        return self._call(loop, lambda: self.engine.import_prefix(export, body.move_id) * block)

    def _call(self, loop: asyncio.AbstractEventLoop, work: Callable[[], T]) -> asyncio.Future[T]:
        """Run `work` on the engine thread, in turn with the batch; its result or error
        settles the returned future on `loop`."""
        fut: asyncio.Future[T] = loop.create_future()

        def command() -> None:
            try:
                loop.call_soon_threadsafe(_settle, fut, work())
            except Exception as err:
                loop.call_soon_threadsafe(_fail, fut, err)

        self._commands.put(command)
        return fut

    def cancel(self, request_id: str) -> None:
        """Drop the request's queued prefill (one running finishes its forward pass) and
        its decode (slot and pages freed)."""
        with self._lock:
            self._queued_exports.discard(request_id)

        def command() -> None:
            if self._decoding.pop(request_id, None) is not None:
                self.engine.cancel(request_id)

        self._commands.put(command)

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]:
        return self._events.since(seq)

    # --- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            busy = self.engine.has_work
            try:
                command = self._commands.get(block=not busy)
            except queue.Empty:
                command = _NOTHING
            if command is None:
                return
            while command is not _NOTHING:
                if command is None:
                    return
                command()
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = _NOTHING
            if self.engine.has_work:
                self._step()
            self._publish()

    def _step(self) -> None:
        try:
            finished = self.engine.step()
        except Exception as err:  # a failed step fails every request in the batch
            for sink in self._decoding.values():
                sink(err)
            for request_id in list(self._decoding):
                self.engine.cancel(request_id)
            self._decoding.clear()
            return
        for completion in finished:
            done = self._decoding.pop(completion.request_id, None)
            if done is not None:
                done(completion)
        if not self.engine.num_running and self.engine.num_waiting:
            threading.Event().wait(IDLE_WAIT_S)  # waiting for pages that nobody frees yet

    def _publish(self) -> None:
        self._events.extend(self.engine.paged.pool.take_events())
        self.num_waiting = self.engine.num_waiting
        self.num_running = self.engine.num_running
        pool = self.engine.paged.pool.pool
        self.free_pages = pool.num_free_pages
        self.held_pages = pool.num_pages - pool.num_free_pages - pool.num_evictable_pages


def _nothing() -> None:
    return None


def _settle(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any], err: BaseException) -> None:
    if not fut.done():
        fut.set_exception(err)


def _prefix_slices(export: PrefixExport) -> tuple[KvSlice, ...]:
    end = len(export.tokens)
    return tuple(
        KvSlice(0, r.group_index, 0, end, "uint8", (r.num_rows, r.row_bytes), r.data)
        for r in export.records
    )


_NOTHING: Callable[[], None] = _nothing


def _threadsafe(
    loop: asyncio.AbstractEventLoop, out: asyncio.Queue[Item], tokenizer: Tokenizer
) -> Callable[[Any], None]:
    def sink(item: Any) -> None:
        loop.call_soon_threadsafe(out.put_nowait, _item(item, tokenizer))

    return sink


def disk_tier_config(spec: DiskTierSpec | None) -> DiskTierConfig | None:
    """The engine's disk tier from the deployment file's instance entry (None: DRAM only)."""
    if spec is None:
        return None
    assert spec.directory is not None  # config validation: a torch tier has one
    return DiskTierConfig(
        Path(spec.directory),
        spec.capacity_mib * 2**20,
        spec.read_mib_per_s * 2**20,
        spec.write_mib_per_s * 2**20,
    )


class TorchBackend(EngineWorker):
    """The `torch` `InstanceBackend`: the deployment's model on an `Engine` thread."""

    def __init__(self, deployment: Deployment, spec: InstanceSpec) -> None:
        model = load_model(deployment.model)
        engine = Engine(
            model,
            EngineConfig(
                block_tokens=deployment.block_tokens,
                capacity_bytes=spec.capacity_mib * 2**20,
                max_batch_size=spec.max_batch_size,
                instance_id=spec.name,
                hash_seed=deployment.hash_seed,
                disk_tier=disk_tier_config(spec.disk_tier),
            ),
        )
        super().__init__(engine)
        layout = engine.paged.config.layout
        disk = engine.paged.config.lower_tier
        num_attention = sum(1 for k in layout.group_kinds if k.value == "attention")
        self.info = BackendInfo(
            max_context_tokens=model.max_context_tokens,
            kv_bytes_per_token=layout.page_bytes * num_attention / deployment.block_tokens,
            kv_capacity_bytes=engine.paged.config.capacity_bytes,
            cache=engine.paged.config.identity,
            peer=identity_for(
                engine.paged.layout.spec, deployment.block_tokens, deployment.hash_seed
            ),
            capabilities=Capabilities(
                moves_prefixes=True,
                reports_cached_prefix=True,
                computes_logprobs=True,
                has_disk_tier=spec.disk_tier is not None,
                byte_tokenizer=isinstance(model.tokenizer, ByteTokenizer) and not model.is_chat,
                prompt_as_chat_turn=model.is_chat,  # `HfTokenizer.encode_prompt`
                tokenizer_from_model_dir=(Path(deployment.model) / "tokenizer.json").is_file(),
                prompt_in_kv_stream=True,
            ),
            vocab_size=int(model.hf_config.vocab_size),
            # real bytes per wall second, as its linear timing counts them
            disk_read_bytes_per_s=disk.read_bytes_per_s if disk is not None else None,
        )

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        try:
            return self.engine.encode(text, add_special_tokens=add_special_tokens)
        except BadRequestError as err:
            raise errors.BadRequestError(str(err)) from None

    def encode_chat(self, chat: p.ChatPrompt) -> list[int]:
        return transcript_ids(self, chat)

    def detokenize(self, token_ids: Sequence[int]) -> str:
        return self.engine.model.tokenizer.decode(token_ids)
