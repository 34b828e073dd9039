"""The engine-facing interface of an instance process, and the three backends behind it.

`instance` talks to one `InstanceBackend` and never to torch: the `torch` backend
(`serve.backends.torch`: an `Engine` on its own thread), the `emulated` backend
(`serve.backends.emulated`: timing from a scaled PerfProfile, KV payloads of the scaled real
size, real pool bookkeeping, no model compute) and the `vllm` backend (`serve.backends.vllm`:
a managed `vllm serve` child, which ships its own KV) all hand back the torch-free items
below, through asyncio queues:

    prefill(request) ──►  KvSlice ... KvSlice  PrefillDone        (layer by layer, then done;
                                                                   no slices: the engine
                                                                   shipped its own KV)
    decode(request)  ──►  Token ... Token  Finished               (token by token, then done)
                          or a BaseException that ended the request

Every backend has the verbs of `InstanceBackend`. What only some can do is declared, not
discovered: each states its `Capabilities` (in `BackendInfo`, reported in `/info`), and the
instance shell asks that value before it calls an optional verb (`cached_prefix`,
`prefix_mover`, `own_kv_links` below: a typed `UnsupportedVerbError` when the capability
says no; `tests/serve/test_backend_interface.py` holds each backend to its word).

Lifecycle: `build_backend` at process start (imports torch only for the torch backend),
`start()` once the event loop runs, `stop()` at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal, Protocol, cast

from prfaas.kvcache import CacheIdentity, KvSlice, TierCounters
from prfaas.serve import protocol as p
from prfaas.serve.backends.event_log import SeqEvent
from prfaas.serve.config.deployment import Backend, Deployment, InstanceSpec
from prfaas.serve.errors import UnsupportedVerbError
from prfaas.serve.profile import PrefillTiming
from prfaas.transfer import LinkSignals, PeerIdentity


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do beyond the verbs every backend has; the instance reports it in
    `/info` (`protocol.CapabilitiesBody`) and the router plans with it.

    ships_own_kv           its engine moves the KV on the instance's transfer port (vLLM's
                           connector): `prefill` yields no slices, the shell neither streams
                           nor listens, the links' telemetry is the engine's (`OwnKvLinks`)
    moves_prefixes         it exports and imports cached prefixes (`PrefixMover`)
    reports_cached_prefix  it says which prompt prefix its cache holds (`CachedPrefix`), and
                           its `prefill` honours `from_token` (ships only what a decode lacks)
    renders_chat           `encode_chat` applies the model's chat template (else: a transcript)
    computes_logprobs      its engine reports token logprobs
    chat_runs_to_context   a chat without max_tokens runs to the context (as `vllm serve`)
    has_disk_tier          its pool demotes evicted blocks to a disk tier (events say the medium)
    byte_tokenizer         its prompts are the byte tokenizer's (`protocol.byte_prompt_ids`;
                           chats a transcript): the router encodes them, with no /tokenize
    prompt_as_chat_turn    a completion prompt is one user turn of the model's chat template
                           (with its generation prompt), encoded without special tokens
    tokenizer_from_model_dir  it encodes with the model directory's tokenizer.json as
                           transformers loads it: a router that reads the directory may encode
                           its prompts itself (`serve.router.model_tokenizer`)
    prompt_in_kv_stream    its prompt ids travel once, in the request's KV stream (the shell's
                           PROMPT frame, docs/protocol.md): the prefill instance sends them,
                           the decode instance takes them from there, and the router's
                           `/decode` leaves them out (a backend whose engine needs them in
                           its own request, vLLM's, is sent them in `/decode`)
    """

    ships_own_kv: bool = False
    moves_prefixes: bool = False
    reports_cached_prefix: bool = False
    renders_chat: bool = False
    computes_logprobs: bool = False
    chat_runs_to_context: bool = False
    has_disk_tier: bool = False
    byte_tokenizer: bool = False
    prompt_as_chat_turn: bool = False
    tokenizer_from_model_dir: bool = False
    prompt_in_kv_stream: bool = False

    def body(self) -> p.CapabilitiesBody:
        """As `/info` reports it."""
        return p.CapabilitiesBody(**asdict(self))


@dataclass(frozen=True, slots=True)
class PrefillDone:
    """The prefill finished; `first_token` is None when the pool had no room. `kv_bytes`:
    what a backend that ships its own KV sent (None: the shell counted the slices it sent);
    `first_finish_reason`: the first token ended the request (its engine's word, vLLM's)."""

    first_token: int | None
    hit_tokens: int
    first_logprob: p.Logprob | None = None
    kv_bytes: int | None = None
    first_finish_reason: Literal["stop"] | None = None


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
class PrefixShipment:
    """The holder's half of a cache move: `tokens` of the prompt's prefix, as `slices` for the
    shell to ship (one per group, token range [0, tokens)), or none when the engine shipped
    them itself (`Capabilities.ships_own_kv`: then `kv_bytes` says how many it sent)."""

    tokens: int
    slices: tuple[KvSlice, ...] = ()
    kv_bytes: int = 0


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What `InstanceInfo` and the transfer handshake need to know about the backend."""

    max_context_tokens: int
    kv_bytes_per_token: float
    kv_capacity_bytes: int
    cache: CacheIdentity
    peer: PeerIdentity
    capabilities: Capabilities
    timing: PrefillTiming | None = None  # None: the router's linear default (torch)
    vocab_size: int | None = None  # None: the engine checks token ids itself (vLLM)
    disk_read_bytes_per_s: float | None = None  # its disk tier's, in `timing`'s units (None: none)


Item = KvSlice | PrefillDone | Token | Finished | BaseException


class InstanceBackend(Protocol):
    """The verbs every backend has: what the instance shell (`serve.instance.runtime`) calls."""

    info: BackendInfo
    num_waiting: int
    num_running: int
    free_pages: int
    held_pages: int  # pool pages referenced by requests (0 when idle; not the cached ones)
    # its pool's disk-tier counters, updated in place (None: no disk tier, or not ours: vLLM)
    disk_tier: TierCounters | None

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """The prompt's ids as the completions prefill them; without specials (and chat
        template) when `add_special_tokens` is False (vLLM's `/tokenize` switch). It may
        block (vLLM's asks its child): the shell calls the tokenizer verbs in a worker
        thread, never on its event loop."""
        ...

    def encode_chat(self, chat: p.ChatPrompt) -> list[int]:
        """A chat's prompt ids: the model's chat template (`renders_chat`), else
        `transcript_ids`."""
        ...

    def detokenize(self, token_ids: Sequence[int]) -> str: ...

    def prefill(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefillRequest
    ) -> asyncio.Queue[Item]:
        """Prefill `body.token_ids`: its KV as slices layer by layer (attention KV from
        `body.from_token` on where the backend `reports_cached_prefix`), then `PrefillDone`.
        A backend that `ships_own_kv` sends it to `body`'s decode endpoint itself."""
        ...

    def decode(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.DecodeRequest,
        slices: Sequence[KvSlice],
    ) -> asyncio.Queue[Item]:
        """Import `slices` (none when it `ships_own_kv`) and decode: tokens, then `Finished`."""
        ...

    def cancel(self, request_id: str) -> None: ...

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]:
        """Its `EventLog.since` (`serve.backends.event_log`)."""
        ...


class CachedPrefix(Protocol):
    """`Capabilities.reports_cached_prefix`: the prompt tokens whose attention KV this pool
    already holds (a decode instance's answer to `/cached`: the prefill then ships only the
    rest, `PrefillRequest.from_token`)."""

    def cached_prefix_tokens(
        self, loop: asyncio.AbstractEventLoop, tokens: list[int]
    ) -> asyncio.Future[int]: ...


class PrefixMover(Protocol):
    """`Capabilities.moves_prefixes`: the holder's restorable prefix of a prompt (at most
    `body.max_tokens`) exported for the target, and the target inserting it into its pool as
    cached blocks (the slices that arrived; none when the engine `ships_own_kv`)."""

    def export_prefix(
        self, loop: asyncio.AbstractEventLoop, body: p.PrefixSendRequest
    ) -> Awaitable[PrefixShipment]: ...

    def import_prefix(
        self,
        loop: asyncio.AbstractEventLoop,
        body: p.PrefixImportRequest,
        slices: Sequence[KvSlice],
    ) -> Awaitable[int]:
        """The prompt tokens restorable from the pool now (0: no room)."""
        ...


class OwnKvLinks(Protocol):
    """`Capabilities.ships_own_kv`: the telemetry of the links its engine sends KV over."""

    def link_signals(self) -> list[LinkSignals]: ...


def _unsupported(verb: str, capability: str) -> UnsupportedVerbError:
    return UnsupportedVerbError(
        f"this instance's backend cannot {verb} (its capabilities say {capability}: false)"
    )


def cached_prefix(backend: InstanceBackend) -> CachedPrefix:
    """`backend` as the `CachedPrefix` its capabilities declare; `UnsupportedVerbError` when
    they do not (the declaration, not the object's type, is the contract)."""
    if not backend.info.capabilities.reports_cached_prefix:
        raise _unsupported("say which prefix it caches", "reports_cached_prefix")
    return cast(CachedPrefix, backend)


def prefix_mover(backend: InstanceBackend) -> PrefixMover:
    """`backend` as the `PrefixMover` its capabilities declare; `UnsupportedVerbError` else."""
    if not backend.info.capabilities.moves_prefixes:
        raise _unsupported("move cached prefixes", "moves_prefixes")
    return cast(PrefixMover, backend)


def own_kv_links(backend: InstanceBackend) -> OwnKvLinks | None:
    """`backend`'s own KV links when its capabilities say it `ships_own_kv`; None: the
    shell's senders carry its KV."""
    if not backend.info.capabilities.ships_own_kv:
        return None
    return cast(OwnKvLinks, backend)


def transcript_ids(backend: InstanceBackend, chat: p.ChatPrompt) -> list[int]:
    """A chat's ids for a backend without a chat template: the plain transcript of its
    messages (`protocol.plain_transcript`)."""
    return backend.encode(p.plain_transcript(chat))


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
