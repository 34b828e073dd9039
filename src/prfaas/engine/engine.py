"""`Engine`: one instance running a model over the pool, with continuous batching.

Lifecycle of a request:

    submit ──► waiting ──(pool has room, batch has a seat)──► prefill ──► running ──► finished
               (FIFO)     admission control: OutOfPages       (or import  (one decode   (pages
                          leaves it waiting, nothing crashes)  of an       step per     released)
                                                               export)     `step()`)

Each `step()` admits what fits, then runs one decode step for every running request in one
forward pass (`batching`); requests join and leave between steps. A request reserves its
decode room (prompt + max_tokens) at admission, so a running request never runs out of pages.

For disaggregation, `export_prefill` runs a prefill only and returns its layer-wise export;
`import_prefill` on another engine turns it into a running request there. Ask the receiver
what it has first (`cached_prefix_tokens`): only the rest of the attention KV travels.
`export_prefix` / `import_prefix` move a cached prefix between two pools (`prefix_move`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from prfaas.engine.batching import DecodeBatch, pads_unequal_lengths
from prfaas.engine.cache_layout import derive_cache_layout
from prfaas.engine.config import EngineConfig
from prfaas.engine.errors import BadRequestError
from prfaas.engine.export import ExportedPrefill
from prfaas.engine.models import LoadedModel
from prfaas.engine.paged_cache import PagedCache
from prfaas.engine.prefill import import_export, run_prefill
from prfaas.engine.prefix_move import PrefixExport, export_prefix, import_prefix
from prfaas.engine.sampling import (
    FinishReason,
    Sampler,
    SamplingParams,
    TokenLogprob,
    token_logprob,
)
from prfaas.kvcache import Allocation, KvSlice, OutOfPages, RequestId


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token, streamed as soon as it is sampled."""

    request_id: str
    index: int
    token_id: int
    logprob: TokenLogprob | None = None  # when asked (`SamplingParams.logprobs`) and known


TokenCallback = Callable[[TokenEvent], None]


@dataclass(frozen=True, slots=True)
class Completion:
    request_id: str
    num_prompt_tokens: int
    num_cached_tokens: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: FinishReason


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    """A prefill that stays on this engine; `last_logits` are the prompt's last token's."""

    request_id: str
    first_token: int
    hit_tokens: int
    last_logits: torch.Tensor


@dataclass(slots=True)
class _Pending:
    request_id: str
    prompt: tuple[int, ...]
    params: SamplingParams
    on_token: TokenCallback | None
    exported: ExportedPrefill | None = None


@dataclass(slots=True)
class _Running:
    pending: _Pending
    allocation: Allocation
    sampler: Sampler
    cache: Any
    hit_tokens: int
    last_logits: torch.Tensor | None = None
    generated: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob | None] = field(default_factory=list)  # one per generated
    text: str = ""

    def add(self, logits: torch.Tensor) -> int:
        """Sample the next token from `logits`; its logprobs too, when asked."""
        token = self.sampler.sample(logits)
        self.generated.append(token)
        k = self.pending.params.logprobs
        self.logprobs.append(None if k is None else token_logprob(logits, token, k))
        return token

    @property
    def length(self) -> int:
        """Tokens in the cache: the prompt and every generated token but the newest."""
        return len(self.pending.prompt) + len(self.generated) - 1


class Engine:
    def __init__(self, model: LoadedModel, config: EngineConfig | None = None) -> None:
        self.model = model
        self.config = config or EngineConfig()
        layout = derive_cache_layout(model.model, model.name, self.config.block_tokens)
        self.paged = PagedCache(layout, self.config, model.hf_config)
        self._waiting: deque[_Pending] = deque()
        self._running: list[_Running] = []
        #: Stacked caches by member ids; a member's own `cache` is stale while it is stacked.
        self._batches: dict[tuple[str, ...], DecodeBatch] = {}
        self._pads_batches = pads_unequal_lengths(model.model, layout)

    # --- requests in -------------------------------------------------------------------

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """A prompt's ids as the completions prefill them (specials, chat template), or
        with `add_special_tokens=False` the text's own ids only."""
        if not text:
            raise BadRequestError("the prompt is empty")
        if not add_special_tokens:
            return self.model.tokenizer.encode_text(text)
        return self.model.tokenizer.encode_prompt(text, chat=self.model.is_chat)

    def submit(
        self,
        request_id: str,
        prompt: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> None:
        """Queue a request; it waits until the pool and the batch have room."""
        self._waiting.append(self._pending(request_id, prompt, params, on_token))

    def submit_import(
        self,
        exported: ExportedPrefill,
        params: SamplingParams,
        on_token: TokenCallback | None = None,
    ) -> None:
        """Queue a request prefilled elsewhere; it decodes here once admitted."""
        pending = self._pending(exported.request_id, exported.prompt_tokens, params, on_token)
        pending.exported = exported
        self._waiting.append(pending)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    # --- the loop ----------------------------------------------------------------------

    def step(self) -> list[Completion]:
        """Admit what fits, then one decode step for the whole batch; returns what finished."""
        finished: list[Completion] = []
        while self._waiting and len(self._running) < self.config.max_batch_size:
            running = self._admit(self._waiting[0])
            if running is None:
                break  # out of pages: wait for running requests to finish
            self._waiting.popleft()
            done = self._emit(running, running.generated[-1])
            if done is not None:
                finished.append(done)
            else:
                self._running.append(running)
        if self._running:
            finished += self._decode_step()
        return finished

    def run(self) -> list[Completion]:
        finished: list[Completion] = []
        while self.has_work:
            before = (len(self._waiting), len(self._running))
            finished += self.step()
            if not self._running and (len(self._waiting), 0) == before:
                raise BadRequestError("a waiting request can never fit this pool")
        return finished

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """Run `prompts` to completion with continuous batching; results in prompt order."""
        for i, prompt in enumerate(prompts):
            self.submit(f"gen-{i}", prompt, params)
        order = {f"gen-{i}": i for i in range(len(prompts))}
        return sorted(self.run(), key=lambda c: order[c.request_id])

    def cancel(self, request_id: str) -> bool:
        """Drop a waiting or running request (its client went away); frees its pages.
        Returns False when the request is unknown or already finished."""
        for pending in self._waiting:
            if pending.request_id == request_id:
                self._waiting.remove(pending)
                return True
        for running in self._running:
            if running.pending.request_id == request_id:
                self._dissolve_batches_of(running)
                self._running = [r for r in self._running if r is not running]
                self.paged.pool.release(RequestId(request_id))
                return True
        return False

    # --- prefill, export, import ---------------------------------------------------------

    def prefill(
        self, request_id: str, prompt: Sequence[int], params: SamplingParams
    ) -> PrefillOutcome | None:
        """Prefill one request now and keep it running here (None: no room in the pool)."""
        pending = self._pending(request_id, prompt, params, None)
        running = self._admit(pending)
        if running is None:
            return None
        self._running.append(running)
        assert running.last_logits is not None
        return PrefillOutcome(
            request_id, running.generated[0], running.hit_tokens, running.last_logits
        )

    def cached_prefix_tokens(self, prompt: Sequence[int]) -> int:
        """Attention KV this engine already holds for `prompt` (what an export may skip)."""
        request = self.paged.request("probe", prompt, 0, imported=True)
        return self.paged.pool.match(request).attention_blocks * self.paged.block_tokens

    def export_prefill(
        self,
        request_id: str,
        prompt: Sequence[int],
        params: SamplingParams,
        from_token: int = 0,
        on_layer: Callable[[KvSlice], None] | None = None,
    ) -> ExportedPrefill | None:
        """Prefill only (a PrfaaS or PD-P instance): the layer-wise export of tokens from
        `from_token` (block aligned) and the final states; the pool keeps the prefix cache.
        `on_layer` sees each record as soon as its layer is done (layer-wise streaming)."""
        pending = self._pending(request_id, prompt, params, None)
        records: list[KvSlice] = []

        def collect(record: KvSlice) -> None:
            records.append(record)
            if on_layer is not None:
                on_layer(record)

        running = self._admit(pending, collect, from_token)
        if running is None:
            return None
        self.paged.pool.release(RequestId(request_id))
        return ExportedPrefill(
            request_id, pending.prompt, running.generated[0], tuple(records), running.logprobs[0]
        )

    # --- cross-cluster prefix moves (prefix_move) ---------------------------------------

    def export_prefix(
        self, prompt: Sequence[int], max_tokens: int | None = None
    ) -> PrefixExport | None:
        """The restorable prefix of `prompt` in this pool (blocks and the state snapshot at
        its boundary), to be imported by another engine's pool; None when there is none."""
        return export_prefix(self.paged, prompt, max_tokens)

    def import_prefix(self, export: PrefixExport, request_id: str = "prefix-import") -> int:
        """Another pool's prefix into this one as cached blocks; the blocks restorable now."""
        return import_prefix(self.paged, export, request_id)

    # --- internals -------------------------------------------------------------------------

    def _pending(
        self,
        request_id: str,
        prompt: Sequence[int],
        params: SamplingParams,
        on_token: TokenCallback | None,
    ) -> _Pending:
        if not prompt:
            raise BadRequestError("the prompt is empty")
        total = len(prompt) + params.max_tokens
        if total > self.model.max_context_tokens:
            raise BadRequestError(
                f"prompt of {len(prompt)} tokens + max_tokens {params.max_tokens} exceeds the "
                f"model's context of {self.model.max_context_tokens} tokens"
            )
        plan = self.paged.pool.plan(
            self.paged.request(request_id, prompt, params.max_tokens, imported=False)
        )
        if plan.num_pages > self.paged.config.num_pages:
            raise BadRequestError(
                f"request needs {plan.num_pages} pages, the pool has {self.paged.config.num_pages}"
            )
        return _Pending(request_id, tuple(prompt), params, on_token)

    def _admit(
        self,
        pending: _Pending,
        on_layer: Callable[[KvSlice], None] | None = None,
        from_token: int = 0,
    ) -> _Running | None:
        imported = pending.exported is not None
        request = self.paged.request(
            pending.request_id, pending.prompt, pending.params.max_tokens, imported=imported
        )
        allocation = self.paged.allocate(request)
        if isinstance(allocation, OutOfPages):
            return None
        try:
            return self._start(pending, allocation, on_layer, from_token)
        except Exception:
            # A failed prefill or import holds nothing: its pages go back, and the units it
            # was loading from disk (maybe partly written) leave the prefix cache.
            unloaded = [move.key for move in allocation.pending_loads]
            self.paged.pool.abandon(allocation.request_id, unloaded)
            raise

    def _start(
        self,
        pending: _Pending,
        allocation: Allocation,
        on_layer: Callable[[KvSlice], None] | None,
        from_token: int,
    ) -> _Running:
        """Prefill (or import) an admitted request into its allocation."""
        sampler = Sampler(pending.params)
        if pending.exported is not None:
            cache = import_export(self.paged, allocation, pending.exported)
            running = _Running(pending, allocation, sampler, cache, 0)
            running.generated.append(pending.exported.first_token)
            running.logprobs.append(pending.exported.first_logprob)
            return running
        run = run_prefill(
            self.model.model,
            self.paged,
            allocation,
            pending.prompt,
            chunk_tokens=self.config.chunk_tokens,
            on_layer=on_layer,
            export_from_token=from_token,
        )
        running = _Running(pending, allocation, sampler, run.cache, run.hit_tokens, run.last_logits)
        running.add(run.last_logits)
        return running

    def _emit(self, running: _Running, token: int) -> Completion | None:
        """Stream the newest token and decide whether the request is done."""
        pending = running.pending
        index = len(running.generated) - 1
        if pending.on_token is not None:
            logprob = running.logprobs[index] if index < len(running.logprobs) else None
            pending.on_token(TokenEvent(pending.request_id, index, token, logprob))
        tokenizer = self.model.tokenizer
        reason: FinishReason | None = None
        if not pending.params.ignore_eos and token in tokenizer.eos_token_ids:
            reason = FinishReason.EOS
        running.text = tokenizer.decode(running.generated)
        for stop in pending.params.stop:
            cut = running.text.find(stop)
            if cut >= 0:
                running.text, reason = running.text[:cut], FinishReason.STOP
        if reason is None and len(running.generated) >= pending.params.max_tokens:
            reason = FinishReason.LENGTH
        if reason is None:
            return None
        self.paged.pool.release(RequestId(pending.request_id))
        return Completion(
            pending.request_id,
            len(pending.prompt),
            running.hit_tokens,
            tuple(running.generated),
            running.text,
            reason,
        )

    def _decode_step(self) -> list[Completion]:
        finished: list[Completion] = []
        still: list[_Running] = []
        for members, batch in self._current_batches():
            done = self._decode(members, batch)
            finished += done
            if done:
                self._dissolve(members)
            ended = {c.request_id for c in done}
            still += [r for r in members if r.pending.request_id not in ended]
        self._running = still
        return finished

    def _decode(self, members: list[_Running], batch: DecodeBatch) -> list[Completion]:
        """One forward for the batch's members; returns those that finished."""
        mask, positions = batch.inputs()
        ids = torch.tensor([[r.generated[-1]] for r in members], dtype=torch.long)
        with torch.no_grad():
            out = self.model.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                cache=batch.cache,
                use_cache=True,
            )
        batch.advance()
        block = self.paged.block_tokens
        finished: list[Completion] = []
        for row, running in enumerate(members):
            length = batch.lengths[row]
            if length % block == 0:  # the token just fed completed a block
                self.paged.write_attention(
                    batch.cache,
                    running.allocation,
                    length - block,
                    length,
                    row=row,
                    seq_offset=batch.padding(row),
                )
            done = self._emit(running, running.add(out.logits[row, -1]))
            if done is not None:
                finished.append(done)
        return finished

    def _decode_groups(self) -> list[list[_Running]]:
        """The requests that share a forward: all of them, or those of one length when the
        model masks a left-padded batch wrongly (`batching.pads_unequal_lengths`)."""
        if self._pads_batches:
            return [self._running]
        by_length: dict[int, list[_Running]] = {}
        for running in self._running:
            by_length.setdefault(running.length, []).append(running)
        return list(by_length.values())

    def _current_batches(self) -> list[tuple[list[_Running], DecodeBatch]]:
        """A stacked cache per decode group, rebuilt only when its membership changed."""
        groups = self._decode_groups()
        keys = [_ids(group) for group in groups]
        for key in [k for k in self._batches if k not in keys]:
            self._dissolve_key(key)
        for key, group in zip(keys, groups, strict=True):
            if key not in self._batches:
                caches = [r.cache for r in group]
                lengths = [r.length for r in group]
                self._batches[key] = DecodeBatch.stack(caches, lengths, self.paged.layout)
        return [(group, self._batches[key]) for key, group in zip(keys, groups, strict=True)]

    def _dissolve(self, members: Sequence[_Running]) -> None:
        self._dissolve_key(_ids(members))

    def _dissolve_batches_of(self, running: _Running) -> None:
        request_id = running.pending.request_id
        for key in [k for k in self._batches if request_id in k]:
            self._dissolve_key(key)

    def _dissolve_key(self, key: tuple[str, ...]) -> None:
        """Give every member still running its own cache back; the batch is rebuilt later."""
        batch = self._batches.pop(key)
        by_id = {r.pending.request_id: r for r in self._running}
        for request_id, cache in zip(key, batch.split(), strict=True):
            if request_id in by_id:
                by_id[request_id].cache = cache


def _ids(members: Sequence[_Running]) -> tuple[str, ...]:
    return tuple(r.pending.request_id for r in members)
