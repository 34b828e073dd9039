"""Bodies between the router and the instances (HTTP, JSON; pydantic at this edge).

    router                                   instance
    GET  /info                         ->    InstanceInfo (identity, role, transfer address,
                                             prefill timing)
    GET  /state?since=N                ->    InstanceState (load, cache events after seq N)
    POST /tokenize    TokenizeRequest  ->    TokenizeResult (a prompt's or a chat's ids)
    POST /detokenize  TokenizeResult   ->    DetokenizeResult
    POST /prefill     PrefillRequest   ->    PrefillResult  (KV streamed to the decode instance)
    POST /decode      DecodeCall       ->    NDJSON lines of DecodeChunk, the last one final
    POST /role        RoleRequest      ->    InstanceInfo (the new role; 409 while busy, or
                                             for an epoch below the lease's: fencing)
    POST /drain       DrainRequest     ->    LeaseAnswer (drained for a flip: `draining` in
                                             /state until the switch or the timeout)
    POST /lease       LeaseRequest     ->    LeaseAnswer (the slow-loop lease: granted or not)
    POST /lease/release LeaseRequest   ->    LeaseAnswer (the holder gives its grant up)
    POST /cancel      CancelRequest    ->    CancelResult (drop a request's prefill call, KV
                                             and engine work: it ended without its decode)
    POST /cached      TokenizeResult   ->    CachedResult (decode: attention KV it holds; the
                                             router reads its own index instead, docs/protocol.md)
    POST /prefix/send   PrefixSendRequest   ->  PrefixSendResult (holder: its cached prefix
                                                 shipped to the target's transfer endpoint)
    POST /prefix/import PrefixImportRequest ->  PrefixImportResult (target: into its pool)

`boot_id` changes on every start, so the router notices a restarted instance and re-registers it
with a clean cache index (a restarted peer's stale entries would misroute: llm-d PR #2187). Cache
events carry a per-instance sequence number: the router pulls what it has not seen, in order
(pull-based events, house style).

Token ids travel as `TokenIds`: base64 of little-endian uint32, one JSON string, never a JSON
list of integers (a 100K-token prompt is 533 KB of base64 against up to 700 KB of digits and
commas, decoded by one `array.frombytes` instead of 100K JSON numbers; docs/protocol.md).
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, ValidationInfo

from prfaas.kvcache import CacheIdentity, HashScheme, Medium
from prfaas.kvcache.layout import GroupKind
from prfaas.serve.errors import BadRequestError


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_TOKEN_ID = 2**32 - 1  # a token id is a uint32 on the wire


def pack_token_ids(token_ids: Sequence[int]) -> str:
    """Token ids as base64 of their little-endian uint32s (`TokenIds`' wire form)."""
    packed = array("I", token_ids)  # OverflowError for an id outside uint32
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack_token_ids(text: str) -> list[int]:
    """`pack_token_ids`' inverse; ValueError for text that is not whole uint32s in base64."""
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise ValueError(f"token ids: not base64 ({err})") from None
    if len(raw) % 4:
        raise ValueError(f"token ids: {len(raw)} bytes is not a whole number of uint32s")
    ids = array("I")
    ids.frombytes(raw)
    if sys.byteorder != "little":
        ids.byteswap()
    return ids.tolist()


def _token_ids(value: Any, info: ValidationInfo) -> list[int]:
    """From the wire (JSON): only the packed string; from Python: a list of uint32s too."""
    if isinstance(value, str):
        return unpack_token_ids(value)
    if info.mode == "python" and isinstance(value, list | tuple):
        try:
            return array("I", value).tolist()
        except (OverflowError, TypeError) as err:
            raise ValueError(f"token ids must be integers in [0, {MAX_TOKEN_ID}]: {err}") from None
    raise ValueError("token ids travel as base64 of little-endian uint32s (docs/protocol.md)")


#: A prompt's token ids: `list[int]` in Python, `pack_token_ids`' string in JSON.
TokenIds = Annotated[
    list[int],
    PlainValidator(_token_ids),
    PlainSerializer(pack_token_ids, return_type=str, when_used="json"),
]


class CacheIdentityBody(_Body):
    block_tokens: int
    model_fingerprint: str
    seed: int
    algorithm: str
    group_kinds: list[str]

    @classmethod
    def of(cls, identity: CacheIdentity) -> CacheIdentityBody:
        s = identity.scheme
        return cls(
            block_tokens=s.block_tokens,
            model_fingerprint=s.model_fingerprint,
            seed=s.seed,
            algorithm=identity.algorithm,
            group_kinds=[k.value for k in identity.group_kinds],
        )

    def identity(self) -> CacheIdentity:
        scheme = HashScheme(self.block_tokens, self.model_fingerprint, self.seed)
        return CacheIdentity(scheme, self.algorithm, tuple(GroupKind(k) for k in self.group_kinds))


class TimingBody(_Body):
    """Prefill seconds and KV bytes at sampled lengths (`serve.profile.PrefillTiming`): one
    prompt's latency, and the prompts the instance prefills at once."""

    source: str
    lengths_tokens: list[int]
    prefill_s: list[float]
    cache_bytes: list[float]
    prefill_concurrency: int = Field(default=1, ge=1)


class CapabilitiesBody(_Body):
    """An instance backend's declared `Capabilities` (`serve.backends.interface`, where each
    is explained); all false: it can do only what every backend does."""

    ships_own_kv: bool = False  # its engine moves the KV itself (vLLM's connector)
    moves_prefixes: bool = False  # it exports and imports cached prefixes (cache moves)
    reports_cached_prefix: bool = False  # it answers /cached (decode-side reuse)
    renders_chat: bool = False  # the model's chat template (else a plain transcript)
    computes_logprobs: bool = False  # its engine reports token logprobs
    # A chat that names no max_tokens runs to the end of the context (the vllm one, as
    # `vllm serve` does); else 16 tokens, as vLLM's completions.
    chat_runs_to_context: bool = False
    has_disk_tier: bool = False  # its pool demotes evicted blocks to disk
    byte_tokenizer: bool = False  # the router encodes its prompts itself (no /tokenize)
    # A completion prompt is one user turn of the model's chat template (torch on a checkpoint
    # that has one); the router renders it so when it reads the model's tokenizer.
    prompt_as_chat_turn: bool = False
    # It encodes with the model directory's tokenizer.json as transformers loads it (torch on
    # a checkpoint directory; vLLM without a tokenizer flag of its own).
    tokenizer_from_model_dir: bool = False
    prompt_in_kv_stream: bool = False  # prompt ids come with the KV: /decode omits them


class InstanceInfo(_Body):
    name: str
    role: str
    cluster: str
    boot_id: str
    model: str
    max_context_tokens: int
    transfer_host: str
    transfer_port: int
    kv_bytes_per_token: float
    kv_capacity_bytes: int
    max_batch_size: int
    cache: CacheIdentityBody
    timing: TimingBody | None = None  # None: an older instance (the router assumes linear)
    vocab_size: int | None = None  # token ids it takes are below it (None: it checks itself)
    # What its backend can do beyond every backend's verbs; the router asks this, never the
    # deployment file's backend.
    capabilities: CapabilitiesBody = Field(default_factory=CapabilitiesBody)
    # The read rate of its disk tier in `timing`'s cache bytes per second of `timing`'s
    # clock: what the router charges a hit on its disk (docs/kvcache.md). None: DRAM only.
    disk_read_bytes_per_s: float | None = Field(default=None, gt=0)


CacheEventRow = tuple[int, bool, int, int, Medium]
"""One cache event in `InstanceState.events`: (seq, stored, group, block_hash, medium), a
row and not an object, so the events of a poll (hundreds a second under load, and every
router replica pulls all of them) cost no key names to send or parse, and no model per event
to build: `stored` False is a removal; `medium` the tier the unit entered or left
(docs/kvcache.md)."""


class LinkBody(_Body):
    """One sender link's telemetry (`prfaas.transfer.LinkSignals`, the fields routing uses)."""

    peer: str
    egress_bytes_per_s: float
    bytes_waiting: int
    bytes_in_flight: int
    bytes_acked_total: int
    rtt_s: float | None


class ResourcesBody(_Body):
    """What requests in progress hold on an instance; every field is 0 when it is idle
    but `receive_pages` and `receive_pages_free` (equal then). `serve.instance.state`."""

    held_pages: int = 0
    receive_pages: int = 0
    receive_pages_free: int = 0
    unclaimed_kv: int = 0
    incoming_transfers: int = 0
    outgoing_transfers: int = 0
    running_calls: int = 0


class DiskTierBody(_Body):
    """An instance's disk tier since it started (`kvcache.TierCounters`): bytes its pool
    demoted to disk and promoted back, and the demoted units the disk could not store (lost,
    as without a tier: a full or failing disk shows here, not as failed requests)."""

    demoted_bytes: int = 0
    promoted_bytes: int = 0
    failed_demotions: int = 0


class RouterLoadBody(_Body):
    """What one router replica has running on an instance: the prefill seconds of its prefill
    calls in progress (as that router estimated them) and its decode calls in progress."""

    prefill_work_s: float = 0.0
    decodes: int = 0


class InstanceState(_Body):
    """Load and cache events. `role` is the instance's role now (a PD instance may have been
    flipped); `prefill_busy_s` the seconds since start with at least one prefill running (PD-P
    utilisation for the slow loop); `active_*` the prefill and decode calls in progress;
    `link_up` whether a PrfaaS instance's kernel-shaped link is there now (None: no such
    link to watch); `load_by_router` the calls in progress by the router replica that placed
    them (each replica counts the others' as load: `scheduler.load.DispatchLedger`)."""

    boot_id: str
    role: str | None = None
    links: list[LinkBody] = []
    num_waiting: int
    num_running: int
    free_pages: int
    events: list[CacheEventRow]
    next_seq: int
    prefill_busy_s: float = 0.0
    active_prefills: int = 0
    active_decodes: int = 0
    resources: ResourcesBody = ResourcesBody()
    disk_tier: DiskTierBody | None = None  # None: no disk tier of ours
    link_up: bool | None = None
    lease: LeaseAnswer | None = None
    draining: bool = False
    load_by_router: dict[str, RouterLoadBody] = {}


class CancelRequest(_Body):
    """The request ended without its decode: drop what this instance holds or does for it."""

    request_id: str = Field(min_length=1, max_length=100)


class CancelResult(_Body):
    """`cancelled_call`: a prefill call was running for it here and was cancelled."""

    request_id: str
    cancelled_call: bool


class RoleRequest(_Body):
    """Switch a drained PD instance to `role` (`pd-prefill` or `pd-decode`); `epoch` is the
    slow-loop lease's of the router that asks (`serve.instance.lease`: an epoch below the
    highest the instance granted, or none once it granted one, is refused: 409 stale_epoch)."""

    role: str
    epoch: int | None = Field(default=None, ge=1)


class DrainRequest(_Body):
    """The lease holder drains this instance for a flip (`timeout_s` from now; 0 ends the
    drain): it reports `draining` in `/state`, so every router replica stops placing work on
    it. Fenced by `epoch` as `RoleRequest` is."""

    epoch: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(ge=0.0, le=86_400.0)


class LeaseRequest(_Body):
    """A router replica asks for (or renews, or gives up) the slow-loop lease at `epoch`
    for `term_s` seconds of the instance's clock (`serve.instance.lease`)."""

    holder: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1)
    term_s: float = Field(default=6.0, gt=0.0, le=60.0)
    threshold_tokens: int | None = Field(default=None, ge=0)  # the asker's t, kept if granted


class RoleSwitchBody(_Body):
    """One role switch the instance made, with the lease epoch it was asked under."""

    epoch: int | None
    from_role: str
    to_role: str
    t_s: float  # the instance's monotonic clock


class LeaseAnswer(_Body):
    """The instance's lease now: `granted` whether the request that got this answer was
    granted; `holder` the live grant's holder (None: none live); `epoch` the highest epoch
    it ever granted (0: none); `remaining_s` of the live grant; `switches` its last role
    switches (fenced by epoch); `threshold_tokens` the t its granted holder sent (the
    other replicas route with it)."""

    granted: bool = False
    holder: str | None = None
    epoch: int = 0
    remaining_s: float = 0.0
    switches: list[RoleSwitchBody] = []
    threshold_tokens: int | None = None  # t as the holder of `epoch` last published it


class ChatTurn(_Body):
    """One chat message as the client sent it (text parts kept as parts: vLLM joins them)."""

    role: str
    content: str | list[dict[str, str]]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.get("text", "") for part in self.content)


class ChatPrompt(_Body):
    """A chat to render into prompt ids, with vLLM's chat-template switches."""

    messages: list[ChatTurn] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def switches_asked(self) -> list[str]:
        """The template switches set to other than their defaults, by name."""
        defaults = ChatPrompt(messages=self.messages)
        names = ("add_generation_prompt", "continue_final_message", "add_special_tokens")
        asked = [n for n in names if getattr(self, n) != getattr(defaults, n)]
        return asked + (["chat_template_kwargs"] if self.chat_template_kwargs else [])


def transcript(messages: list[ChatTurn]) -> str:
    """A plain transcript, the chat prompt of a backend without a chat template (the
    reference engine's presets; docs/serving.md)."""
    speakers = {"developer": "system"}
    lines = [f"{speakers.get(m.role, m.role)}: {m.text}" for m in messages]
    return "\n".join([*lines, "assistant:"])


def plain_transcript(chat: ChatPrompt) -> str:
    """A chat's prompt for a backend without a chat template: the plain transcript of its
    messages, which has none of a template's switches to honour (asking one is a 400)."""
    asked = chat.switches_asked
    if asked:
        err = BadRequestError(
            f"{asked[0]} needs a chat template; this deployment's backend renders chats as "
            "a plain transcript (docs/serving.md)",
            param=asked[0],
        )
        err.code = "unsupported_parameter"
        raise err
    return transcript(chat.messages)


BYTE_BOS_ID = 257  # the byte tokenizer's <bos> (`prfaas.engine.tokenizer`: bytes, pad, bos, eos)


def byte_prompt_ids(text: str, *, add_special_tokens: bool = True) -> list[int]:
    """A prompt's ids under the byte tokenizer: <bos> and its UTF-8 bytes (the bytes alone
    without special tokens). One function for the emulated backend and the router."""
    ids = list(text.encode("utf-8"))
    return [BYTE_BOS_ID, *ids] if add_special_tokens else ids


def byte_text(token_ids: Sequence[int]) -> str:
    """The byte tokenizer's text of `token_ids`: specials dropped, bad UTF-8 replaced."""
    return bytes(t for t in token_ids if 0 <= t < 256).decode("utf-8", errors="replace")


#: `transcript` as a Hugging Face chat template (Jinja): what `prfaas tokenizer` writes for
#: the byte tokenizer. A client that renders a chat with it and encodes the text with the
#: tokenizer's special tokens (`tokenizer(text)`: the <bos> the server adds too) counts the ids
#: the chat endpoint prefills (tests/engine/test_tokenizer_dir.py keeps them equal); the
#: generation prompt is always there, as in `transcript`.
TRANSCRIPT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if not loop.first -%}{{- '\n' -}}{%- endif -%}"
    "{%- if message['role'] == 'developer' -%}system{%- else -%}{{- message['role'] -}}"
    "{%- endif -%}{{- ': ' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}{{- part['text'] | default('') -}}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '\nassistant:' -}}"
)


class TokenizeRequest(_Body):
    """A prompt's text, or a chat (`chat`: rendered as the chat endpoint does)."""

    text: str = ""
    add_special_tokens: bool = True  # False: the text's own ids (no <bos>, no template)
    chat: ChatPrompt | None = None


class TokenizeResult(_Body):
    token_ids: TokenIds


class DetokenizeResult(_Body):
    text: str


class TopLogprob(_Body):
    """A token's log-probability, with the token as text and as the bytes it stands for."""

    token_id: int
    token: str
    bytes: list[int]
    logprob: float


class Logprob(TopLogprob):
    """A generated token's log-probability and the most likely tokens' (`top`, best first),
    from the raw logits (`engine.sampling.TokenLogprob`)."""

    top: list[TopLogprob] = []


class Sampling(_Body):
    """Checked again on the instance (defence in depth: the router checked it first), so a
    request the engine cannot honour is a request-scoped 4xx there, never a worker error."""

    max_tokens: int = Field(gt=0, le=1_000_000)
    temperature: float = Field(ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(ge=0, le=2**31 - 1)
    seed: int = Field(ge=-(2**63), le=2**63 - 1)
    stop: list[Annotated[str, Field(min_length=1)]] = Field(default=[], max_length=16)
    ignore_eos: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)  # None: none; k: sampled + top k
    # the fields above the client left unset: an engine with defaults of its own (vLLM:
    # the model's generation_config.json) uses those; the others take the values above
    engine_defaults: list[Literal["temperature", "top_p", "top_k"]] = []


class PrefillRequest(_Body):
    request_id: str = Field(min_length=1, max_length=100)
    token_ids: Annotated[TokenIds, Field(min_length=1)]
    sampling: Sampling
    decode_transfer_host: str
    decode_transfer_port: int
    from_token: int = 0
    router: str = Field(default="", max_length=200)  # the replica that placed it
    work_s: float = Field(default=0.0, ge=0.0)  # its prefill seconds, as that router counts


class PrefillResult(_Body):
    request_id: str
    first_token: int
    hit_tokens: int
    kv_bytes: int
    num_slices: int
    prefill_s: float
    transfer_s: float
    first_logprob: Logprob | None = None  # when the sampling asked for logprobs
    # "stop" when the first token already ended the request (EOS, a stop token or a stop
    # string), as decided by an engine that decides it at the prefill (the vllm backend); the
    # router hands it to the decode instance. Other backends decide on the decode instance.
    first_finish_reason: Literal["stop"] | None = None


class DecodeCall(_Body):
    """The router's `/decode` body. `token_ids` None: the prompt's ids come with the
    request's KV (the transfer stream's PROMPT frame), as they do when both instances declare
    `prompt_in_kv_stream`; so a long prompt leaves the router once, in `/prefill`."""

    request_id: str = Field(min_length=1, max_length=100)
    token_ids: Annotated[TokenIds, Field(min_length=1)] | None = None
    first_token: int
    sampling: Sampling
    first_finish_reason: Literal["stop"] | None = None  # PrefillResult's
    router: str = Field(default="", max_length=200)  # the replica that placed it

    def request(self, token_ids: list[int]) -> DecodeRequest:
        """The decode as the backend takes it, its prompt `token_ids` resolved by the shell
        (this call's, or the ones that arrived with the KV)."""
        fields = self.model_dump(exclude={"token_ids"})
        return DecodeRequest.model_validate({**fields, "token_ids": token_ids})


class DecodeRequest(_Body):
    """A decode as the instance's backend takes it: a `DecodeCall` with its prompt known."""

    request_id: str = Field(min_length=1, max_length=100)
    token_ids: Annotated[TokenIds, Field(min_length=1)]
    first_token: int
    sampling: Sampling
    first_finish_reason: Literal["stop"] | None = None  # PrefillResult's
    router: str = Field(default="", max_length=200)  # the replica that placed it


class DecodeChunk(_Body):
    """One token (`text` is the newly printable text), or the final line with `finish_reason`,
    or an `error` that ended the request."""

    token_id: int | None = None
    text: str = ""
    logprob: Logprob | None = None  # the token's, when the sampling asked for logprobs
    finish_reason: str | None = None
    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0
    full_text: str | None = None
    error: str | None = None


class CachedResult(_Body):
    """Prompt tokens whose attention KV a decode instance already holds (block aligned)."""

    tokens: int


class PrefixSendRequest(_Body):
    """Ship the restorable prefix of `token_ids` (at most `max_tokens`) to a target."""

    move_id: str = Field(min_length=1, max_length=100)
    token_ids: Annotated[TokenIds, Field(min_length=1)]
    max_tokens: int = Field(ge=0)
    target_transfer_host: str
    target_transfer_port: int


class PrefixSendResult(_Body):
    move_id: str
    tokens: int  # 0: nothing to move (the holder no longer has it)
    kv_bytes: int
    num_slices: int


class PrefixImportRequest(_Body):
    """Wait for move `move_id` to arrive and insert it into the pool; `tokens` is its prefix."""

    move_id: str = Field(min_length=1, max_length=100)
    token_ids: Annotated[TokenIds, Field(min_length=1)]


class PrefixImportResult(_Body):
    move_id: str
    hit_tokens: int  # tokens of the prefix restorable on this instance now
