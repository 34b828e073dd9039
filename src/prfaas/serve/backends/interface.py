"""The engine-facing interface of an instance process, and the three backends behind it.

`instance` talks to one `InstanceBackend` and never to torch: the `torch` backend
(`serve.backends.torch`: an `Engine` on its own thread), the `emulated` backend
(`serve.backends.emulated`: timing from a scaled PerfProfile, KV payloads of the scaled real
size, real pool bookkeeping, no model compute) and the `vllm` backend (`serve.backends.vllm`:
a managed `vllm serve` child, which ships its own KV) all hand back the torch-free items
below, through asyncio queues:

    export(request)  ──►  KvSlice ... KvSlice  PrefillDone        (layer by layer, then done)
    decode(request)  ──►  Token ... Token  Finished               (token by token, then done)
                          or a BaseException that ended the request

Lifecycle: `build_backend` at process start (imports torch only for the torch backend),
`start()` once the event loop runs, `stop()` at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from prfaas.kvcache import CacheEvent, CacheIdentity
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Backend, Deployment, InstanceSpec
from prfaas.serve.profile import PrefillTiming
from prfaas.transfer import LinkSignals, PeerIdentity


@dataclass(frozen=True, slots=True)
class KvSlice:
    """One layer's (or state group's) KV for a token range: one transfer slice.

    Field for field the same as `engine.export.ExportRecord`; it is restated here because
    importing `prfaas.engine` loads torch, which emulated instances must not.
    """

    layer_index: int
    group_index: int
    token_start: int
    token_end: int
    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class PrefillDone:
    """The prefill finished; `first_token` is None when the pool had no room."""

    first_token: int | None
    hit_tokens: int
    first_logprob: p.Logprob | None = None


@dataclass(frozen=True, slots=True)
class Token:
    """One output token. `text`: what it adds to the streamed text when the backend makes the
    text itself (vLLM: its detokenizer, holding back a possible stop string's start); None:
    the instance detokenizes the ids so far."""

    token_id: int
    logprob: p.Logprob | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Finished:
    num_prompt_tokens: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str


@dataclass(frozen=True, slots=True)
class SeqEvent:
    """A pool event with the instance's sequence number (the router pulls `events_since`)."""

    seq: int
    event: CacheEvent


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What `InstanceInfo` and the transfer handshake need to know about the backend."""

    max_context_tokens: int
    kv_bytes_per_token: float
    kv_capacity_bytes: int
    cache: CacheIdentity
    peer: PeerIdentity
    timing: PrefillTiming | None = None  # None: the router's linear default (torch)
    vocab_size: int | None = None  # None: the engine checks token ids itself (vLLM)
    computes_logprobs: bool = False  # its engine reports token logprobs (torch)
    chat_runs_to_context: bool = False  # a chat without max_tokens runs to the context (vLLM)
    byte_tokenizer: bool = False  # prompts are `protocol.byte_prompt_ids` (the router encodes)


Item = KvSlice | PrefillDone | Token | Finished | BaseException


@runtime_checkable
class PrefixMover(Protocol):
    """A backend that can move cached prefixes between pools (the torch one): the holder's
    restorable prefix of a prompt as one `KvSlice` per group (token range [0, k*B), rows of
    pool units), and the target inserting such slices into its pool as cached blocks. It also
    answers what prefix a decode pool holds, and exports a prefill from a token on, so only
    the attention KV the decode instance lacks is shipped (KV it holds would cross the link
    again for nothing)."""

    def export_prefix(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int], max_tokens: int
    ) -> asyncio.Future[list[KvSlice]]: ...

    def import_prefix(
        self,
        loop: asyncio.AbstractEventLoop,
        move_id: str,
        tokens: list[int],
        slices: Sequence[KvSlice],
    ) -> asyncio.Future[int]: ...

    def cached_prefix_tokens(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int]
    ) -> asyncio.Future[int]:
        """Prompt tokens whose attention KV this pool already holds (a decode instance's
        answer: the prefill then ships only the rest, `export_from`)."""
        ...

    def export_from(
        self,
        loop: asyncio.AbstractEventLoop,
        request_id: str,
        tokens: list[int],
        sampling: p.Sampling,
        from_token: int,
    ) -> asyncio.Queue[Item]:
        """`export` shipping attention KV only from `from_token` (block aligned) on."""
        ...


@runtime_checkable
class CachedPrefixReporter(Protocol):
    """A backend that can say which prompt prefix its cache holds (a decode instance's answer
    to `/cached`: the prefill then ships only the rest)."""

    def cached_prefix_tokens(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int]
    ) -> asyncio.Future[int]: ...


@runtime_checkable
class ShipsOwnKv(Protocol):
    """A backend whose engine moves the KV itself (vLLM's connector over `prfaas.transfer`,
    on the instance's transfer port): the shell neither streams slices nor listens."""

    async def prefill(self, body: p.PrefillRequest) -> p.PrefillResult: ...

    def link_signals(self) -> list[LinkSignals]: ...


@runtime_checkable
class MovesOwnPrefixes(Protocol):
    """A `ShipsOwnKv` backend that carries out cache moves through its engine (vLLM): the
    holder ships its held prefix of a prompt to the target's transfer endpoint, the target
    loads it into its engine's prefix cache. The shell checks addresses and keeps the count
    of work in progress; the engine moves the bytes. `moves_prefixes` False: this model's
    prefixes cannot be moved so (a hybrid one on vLLM: docs/vllm.md, Limits)."""

    moves_prefixes: bool

    async def ship_prefix(self, body: p.PrefixSendRequest) -> p.PrefixSendResult: ...

    async def receive_prefix(self, body: p.PrefixImportRequest) -> p.PrefixImportResult: ...


@runtime_checkable
class RendersChat(Protocol):
    """A backend whose engine renders a chat with the model's chat template (vLLM: the
    child's own `/tokenize`, so the ids are the ones `vllm serve` alone would prefill).
    Other backends tokenize `protocol.transcript` of the messages."""

    def encode_chat(self, chat: p.ChatPrompt) -> list[int]: ...


class InstanceBackend(Protocol):
    info: BackendInfo
    num_waiting: int
    num_running: int
    free_pages: int
    held_pages: int  # pool pages referenced by requests (0 when idle; not the cached ones)

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """The prompt's ids as the completions prefill them; without specials (and chat
        template) when `add_special_tokens` is False (vLLM's `/tokenize` switch)."""
        ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

    def export(
        self,
        loop: asyncio.AbstractEventLoop,
        request_id: str,
        tokens: list[int],
        sampling: p.Sampling,
    ) -> asyncio.Queue[Item]: ...

    def decode(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.DecodeRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Queue[Item]: ...

    def cancel(self, request_id: str) -> None: ...

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]: ...


def build_backend(deployment: Deployment, spec: InstanceSpec) -> InstanceBackend:
    """The instance's backend; torch (or the vLLM child) only when it is chosen."""
    if spec.backend is Backend.EMULATED:
        from prfaas.serve.backends.emulated import EmulatedBackend

        return EmulatedBackend(deployment, spec)
    if spec.backend is Backend.VLLM:
        from prfaas.serve.backends.vllm.backend import VllmBackend

        return VllmBackend(deployment, spec)
    from prfaas.serve.backends.torch import TorchBackend

    return TorchBackend(deployment, spec)
