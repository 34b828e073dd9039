"""`PrfaasConnector`: vLLM's KV connector API over prfaas's transfer layer.

Loaded by vLLM from outside its tree:

    --kv-transfer-config '{"kv_connector": "PrfaasConnector",
        "kv_connector_module_path": "prfaas.integrations.vllm.connector",
        "kv_role": "kv_both", "kv_connector_extra_config": {...}}'   (`ConnectorSettings`)

A request opts in through its `kv_transfer_params` (the prfaas instance shell sets them):

    prefill: {"prfaas_send": {"transfer_id", "host", "port", "from_token", "move"}},
             max_tokens 1 ("move": a cache move, paced as the link: `VllmBackend.ship_prefix`)
             -> the response's kv_transfer_params {"prfaas_transfer_id", "prfaas_num_tokens",
                "prfaas_kv_bytes", "prfaas_from_token"}
    decode:  {"prfaas_recv": {"transfer_id"}}, prompt = the prefill's prompt + its token
    drop:    {"prfaas_recv": {"transfer_id", "discard": true}}: the staged transfer is not
             needed (the request ended at its first token)

Prefill side (push, layer-wise). Each scheduler step, the scheduler half names the blocks of
every sending request that this step completes (`SaveSpec`: full blocks as they fill, the
partial tail on the last step, from `from_token` on: what the decode side lacks); the worker
half ships each attention layer's blocks from `save_kv_layer` as soon as that layer wrote
them, zero-copy from vLLM's cache tensors, one slice per layer per step. Linear-attention /
Mamba state never reaches `save_kv_layer`, so on the last step `wait_for_save` ships every
mamba layer's conv and SSM state read out of the request's state block (the last block of the
mamba group) and finishes the transfer. `request_finished_all_groups` returns
`delay_free=True`: vLLM keeps the blocks until the worker reports the send done
(`get_finished`), which it does only once the receiver has committed every byte (or the
transfer failed) and vLLM has told it the request finished.

The prefill computes every prompt token and samples the first output token; the decode
request's prompt is the prompt plus that token, so the decode side computes exactly the
forwards a single engine would after its prefill (the first token on). vLLM's NIXL connector
instead stops a hybrid prefill one token short and lets the decode side compute the last
prompt token in a one-token forward, a computation a single engine never makes (a linear-
attention state cannot be rolled back, so the decode side cannot recompute that token).

Decode side (asynchronous load). `get_num_new_matched_tokens` answers
`(prompt - 1 - locally cached, True)`: vLLM allocates blocks and parks the request in
`WAITING_FOR_REMOTE_KVS`; `update_state_after_alloc` records its block ids; the worker half
waits for the transfer to be committed in its receiver, copies the slices into those blocks
(attention KV from the local hit on; the state into the request's state block) and reports
the request in `get_finished`. A transfer that was aborted, timed out or lacks blocks is
reported through `failed_recving` and `get_block_ids_with_load_errors`, so vLLM recomputes
the missing part locally: the request still completes, and nothing stays pinned.

Layout: vLLM's CPU attention cache is allocated as [blocks, kv heads, block tokens, 2 x head
dim], but how the tokens sit inside a block is the attention kernel's business (keys of every
token then their values per head, packed per ISA). So a block always moves whole, bytes as
they are in memory, also the prompt's last, partial one (its slice key still says the tokens
it holds): no layout assumption, at the cost of up to one block per layer of padding per
transfer. A logical block may span several kernel blocks. Slices are keyed by
`SliceKey(tensor index, kv group, token start, token end)`, where the tensor index numbers
every cache tensor of the model (attention layers one each, mamba layers one per state
tensor) in layer-name order; both ends compute the same numbering from the same model.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from vllm.v1.attention.backends.utils import NULL_BLOCK_ID
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)

from prfaas.integrations.vllm.settings import ConnectorSettings
from prfaas.transfer import PeerAddress, SliceKey

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


@dataclass(frozen=True, slots=True)
class SaveSpec:
    """Ship tokens [ship_start, ship_end) of a request this step; `is_last`: then its state
    and END."""

    req_id: str
    transfer_id: str
    host: str
    port: int
    block_ids: tuple[list[int], ...]
    ship_start: int
    ship_end: int
    is_last: bool
    num_tokens: int
    is_move: bool  # a cache move: sent paced as the inter-cluster link


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Load tokens [start, end) of transfer `transfer_id` into `block_ids` (state at end)."""

    req_id: str
    transfer_id: str
    block_ids: tuple[list[int], ...]
    start: int
    end: int


@dataclass
class PrfaasMetadata(KVConnectorMetadata):
    saves: list[SaveSpec] = field(default_factory=list)
    loads: list[LoadSpec] = field(default_factory=list)
    discards: list[str] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Sending:
    request: Request
    transfer_id: str
    host: str
    port: int
    shipped: int  # tokens already named in a SaveSpec (block aligned until the last)
    from_token: int
    is_move: bool
    finalized: bool = False


def _state_block(block_ids: list[int], block_tokens: int, num_tokens: int) -> int | None:
    """The block holding a mamba group's state after `num_tokens` tokens, or None if vLLM
    allocated none there. States are positional: block i holds the state after up to
    (i + 1) x block tokens (with prefix caching, vLLM's "align" mode, earlier blocks may be
    null; without it a mamba block spans the whole model length, so this is block 0)."""
    index = (num_tokens - 1) // block_tokens
    if index >= len(block_ids) or block_ids[index] == NULL_BLOCK_ID:
        return None
    return block_ids[index]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def cache_layout(groups: list[Any]) -> list[dict[str, Any]]:
    """vLLM's KV cache groups, a kind, a layer count, a window and the attention's KV heads
    and head size each: the instance shell checks them against the ModelSpec it sized the
    router's KV with (`serve.backends.vllm_arch.layout_mismatch`). The kind is the spec class
    vLLM built the model's layers with, so a config field vLLM reads otherwise shows here."""
    layout = []
    for group in groups:
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):  # one kind, per-layer shapes
            spec = next(iter(spec.kv_cache_specs.values()))
        if isinstance(spec, MambaSpec):
            kind = "state"
        elif isinstance(spec, MLAAttentionSpec):
            kind = "mla"
        elif isinstance(spec, SlidingWindowSpec):
            kind = "sliding"
        elif type(spec) is FullAttentionSpec:
            kind = "full"
        else:
            kind = type(spec).__name__
        entry: dict[str, Any] = {"kind": kind, "layers": len(group.layer_names), "window": None}
        if kind == "sliding":
            entry["window"] = spec.sliding_window
        if kind in ("full", "sliding"):
            entry |= {"kv_heads": spec.num_kv_heads, "head_size": spec.head_size}
        layout.append(entry)
    return layout


class PrfaasConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(
        self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig
    ) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        self._settings = ConnectorSettings.model_validate(extra)
        self._groups = kv_cache_config.kv_cache_groups
        self._is_mamba = [isinstance(g.kv_cache_spec, MambaSpec) for g in self._groups]
        self._block_tokens = [g.kv_cache_spec.block_size for g in self._groups]
        # vLLM's "align" mamba cache mode (prefix caching on a hybrid model): before the
        # first step it copies the state from block (computed - 1) // block into the step's
        # block; for a load that ends on a block boundary the source is a null block, so
        # such a request is computed locally instead (docs/vllm.md, Limits)
        self._aligned_state_tokens = [
            g.kv_cache_spec.block_size
            for g in self._groups
            if isinstance(g.kv_cache_spec, MambaSpec)
            and g.kv_cache_spec.mamba_cache_mode == "align"
        ]
        self._group_of = {n: i for i, g in enumerate(self._groups) for n in g.layer_names}
        if role is KVConnectorRole.SCHEDULER:
            self._sending: dict[str, _Sending] = {}
            self._loads: list[LoadSpec] = []
            self._discards: list[str] = []
            self._aborts: list[str] = []
            self._recv_matched: dict[str, int] = {}
        else:
            self._worker = _Worker(self._settings, vllm_config, self._groups, self._is_mamba)

    # ==== scheduler side ==================================================================

    def on_new_request(self, request: Request) -> None:
        send = (request.kv_transfer_params or {}).get("prfaas_send")
        if not send:
            return
        block = self._block_tokens[0]
        from_token = min(int(send.get("from_token", 0)), request.num_prompt_tokens)
        from_token -= from_token % block
        self._sending[request.request_id] = _Sending(
            request,
            str(send["transfer_id"]),
            str(send["host"]),
            int(send["port"]),
            from_token,
            from_token,
            bool(send.get("move", False)),
        )

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        recv = (request.kv_transfer_params or {}).get("prfaas_recv")
        if not recv or recv.get("consumed"):
            return 0, False
        # the transfer holds the prompt minus its last token, the prefill's sampled one
        moved = request.num_prompt_tokens - 1
        count = moved - num_computed_tokens
        on_boundary = any(moved % tokens == 0 for tokens in self._aligned_state_tokens)
        if count <= 0 or recv.get("discard") or on_boundary:
            self._discards.append(str(recv["transfer_id"]))
            recv["consumed"] = True
            return 0, False
        self._recv_matched[request.request_id] = num_computed_tokens
        return count, True

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        recv = (request.kv_transfer_params or {}).get("prfaas_recv")
        if not recv or recv.get("consumed") or num_external_tokens == 0:
            return
        recv["consumed"] = True
        start = self._recv_matched.pop(request.request_id, 0)
        self._loads.append(
            LoadSpec(
                request.request_id,
                str(recv["transfer_id"]),
                tuple(list(ids) for ids in blocks.get_block_ids()),
                start,
                start + num_external_tokens,
            )
        )

    def get_loaded_kv_cache_group_ids(self, request: Request) -> tuple[int, ...]:
        return tuple(range(len(self._groups)))  # every group: attention KV and state

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        meta = PrfaasMetadata(loads=self._loads, discards=self._discards, aborts=self._aborts)
        self._loads, self._discards, self._aborts = [], [], []
        scheduled = [(r.req_id, r.num_computed_tokens) for r in scheduler_output.scheduled_new_reqs]
        cached = scheduler_output.scheduled_cached_reqs
        scheduled += list(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
        for req_id, computed in scheduled:
            sending = self._sending.get(req_id)
            if sending is None or sending.finalized:
                continue
            end = computed + scheduler_output.num_scheduled_tokens.get(req_id, 0)
            total = sending.request.num_prompt_tokens
            is_last = end >= total
            block = self._block_tokens[0]
            ship_end = total if is_last else end - end % block
            if ship_end <= sending.shipped and not is_last:
                continue
            assert self._kv_cache_manager is not None
            meta.saves.append(
                SaveSpec(
                    req_id,
                    sending.transfer_id,
                    sending.host,
                    sending.port,
                    tuple(list(ids) for ids in self._kv_cache_manager.get_block_ids(req_id)),
                    sending.shipped,
                    ship_end,
                    is_last,
                    total,
                    sending.is_move,
                )
            )
            sending.shipped = ship_end
            sending.finalized = is_last
        return meta

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(
        self, request: Request, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        sending = self._sending.pop(request.request_id, None)
        if sending is None:
            return False, None
        if not sending.finalized:  # ended before its last prefill step: nothing to hand over
            self._aborts.append(sending.transfer_id)
            return False, None
        return True, {
            "prfaas_transfer_id": sending.transfer_id,
            "prfaas_num_tokens": request.num_prompt_tokens,
            "prfaas_from_token": sending.from_token,
            "prfaas_kv_bytes": self._kv_bytes(request.num_prompt_tokens - sending.from_token),
        }

    def _kv_bytes(self, attention_tokens: int) -> int:
        """Payload bytes a transfer carries: what `_Worker` ships, counted from the specs."""
        total = 0
        for group, is_mamba in zip(self._groups, self._is_mamba, strict=True):
            spec = group.kv_cache_spec
            layers = len(group.layer_names)
            if is_mamba:
                assert isinstance(spec, MambaSpec)
                total += layers * sum(
                    math.prod(shape) * dtype.itemsize
                    for shape, dtype in zip(spec.shapes, spec.dtypes, strict=True)
                )
            elif isinstance(spec, AttentionSpec):
                total += (
                    layers
                    * spec.real_page_size_bytes
                    * math.ceil(attention_tokens / spec.block_size)
                )
        return total

    def has_pending_push_work(self) -> bool:
        return any(s.finalized for s in self._sending.values())

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: VllmConfig) -> str | None:
        return None  # the CPU backend has one layout (LBHNC), checked at registration

    # ==== worker side =====================================================================

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._worker.register(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, PrfaasMetadata)
        self._worker.begin_step(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are asynchronous: a loading request is not in the batch

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, PrfaasMetadata)
        self._worker.save_layer(meta, layer_name)

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, PrfaasMetadata)
        self._worker.end_step(meta)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        return self._worker.results(finished_req_ids)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        results = self._worker.results(finished_req_ids)
        return results.finished_sending, results.finished_recving

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_load_errors()

    def shutdown(self) -> None:
        if self._role is KVConnectorRole.WORKER:
            self._worker.close()


class _Worker:
    """The worker half: cache tensors, shipping and loading (see the module docstring)."""

    def __init__(
        self,
        settings: ConnectorSettings,
        vllm_config: VllmConfig,
        groups: list[Any],
        is_mamba: list[bool],
    ) -> None:
        from prfaas.integrations.vllm.transfer_io import IoSettings, TransferIO

        self._settings = settings
        self._groups = groups
        self._is_mamba = is_mamba
        self._group_of = {n: i for i, g in enumerate(groups) for n in g.layer_names}
        self._tensors: dict[str, list[tuple[int, torch.Tensor]]] = {}  # layer -> (index, t)
        self._layer_order: list[str] = []
        secret = os.environ.get(settings.secret_env, "").encode()
        self.io = TransferIO(
            IoSettings(
                plan=settings.shipping,
                secret=secret,
                status_path=settings.status_path,
                staged_ttl_s=settings.staged_ttl_s,
                cache_layout=cache_layout(groups),
            ),
            settings.peer_identity(
                vllm_config.model_config.model, groups[0].kv_cache_spec.block_size
            ),
        )
        self._sends: dict[str, str] = {}  # req_id -> transfer_id, finalized sends
        self._finished: set[str] = set()
        self._loads: dict[str, tuple[LoadSpec, float]] = {}
        # transfer id -> when its discard came: KV that lands later is dropped on arrival; a
        # discard whose KV never comes (the prefill was cancelled first) is forgotten after the
        # staging deadline, as the KV itself would be
        self._discards: dict[str, float] = {}
        self._load_errors: set[int] = set()

    # --- registration ----------------------------------------------------------------------

    def register(self, kv_caches: dict[str, Any]) -> None:
        index = 0
        for name in sorted(kv_caches):
            value = kv_caches[name]
            parts = list(value) if isinstance(value, (list, tuple)) else [value]
            if name not in self._group_of:
                continue
            group = self._group_of[name]
            if not self._is_mamba[group] and parts[0].dim() != 4:
                raise RuntimeError(
                    f"prfaas connector: {name} has a {parts[0].dim()}-d cache; "
                    "it expects vLLM's CPU layout [blocks, heads, tokens, 2 x head dim]"
                )
            self._tensors[name] = []
            for part in parts:
                self._tensors[name].append((index, part))
                index += 1
            self._layer_order.append(name)

    def _kernel_blocks(self, name: str, tensor: torch.Tensor) -> int:
        """Kernel blocks per logical block of an attention tensor (its dim 2: kernel tokens)."""
        logical = self._groups[self._group_of[name]].kv_cache_spec.block_size
        return int(logical // tensor.shape[2])

    # --- prefill: ship -----------------------------------------------------------------

    def begin_step(self, meta: PrfaasMetadata) -> None:
        now = time.monotonic()
        for load in meta.loads:
            self._loads[load.req_id] = (load, now)
        self._discards.update(dict.fromkeys(meta.discards, now))
        for transfer_id in meta.aborts:
            self.io.abort(transfer_id)

    def save_layer(self, meta: PrfaasMetadata, layer_name: str) -> None:
        if not meta.saves or layer_name not in self._tensors:
            return
        group = self._group_of[layer_name]
        if self._is_mamba[group]:
            return
        for save in meta.saves:
            for index, tensor in self._tensors[layer_name]:
                self._ship_tokens(save, layer_name, group, index, tensor)

    def _ship_tokens(
        self, save: SaveSpec, name: str, group: int, index: int, tensor: torch.Tensor
    ) -> None:
        """Blocks [ship_start, ship_end) of one cache tensor, whole (the last may be partial
        in tokens, never in bytes), zero-copy from the cache: vLLM keeps them until sent."""
        logical = self._groups[group].kv_cache_spec.block_size
        ids = save.block_ids[group]
        peer = PeerAddress(save.host, save.port)
        per_block = self._kernel_blocks(name, tensor)
        dtype = _dtype_name(tensor.dtype)
        for block in range(save.ship_start // logical, math.ceil(save.ship_end / logical)):
            rows = tensor[ids[block] * per_block : (ids[block] + 1) * per_block]
            start = block * logical
            key = SliceKey(index, group, start, min(start + logical, save.ship_end))
            self.io.send_slice(
                save.transfer_id,
                peer,
                key,
                dtype=dtype,
                shape=tuple(rows.shape),
                payload=_raw(rows),
                is_move=save.is_move,
            )

    def end_step(self, meta: PrfaasMetadata) -> None:
        for save in meta.saves:
            if not save.is_last:
                continue
            peer = PeerAddress(save.host, save.port)
            for name in self._layer_order:
                group = self._group_of[name]
                if not self._is_mamba[group] or not save.block_ids[group]:
                    continue
                block_tokens = self._groups[group].kv_cache_spec.block_size
                state_block = _state_block(save.block_ids[group], block_tokens, save.num_tokens)
                if state_block is None:
                    continue  # no state to ship: the receiver's load fails, vLLM recomputes
                for index, tensor in self._tensors[name]:
                    state = tensor[state_block]
                    key = SliceKey(index, group, save.num_tokens, save.num_tokens)
                    self.io.send_slice(
                        save.transfer_id,
                        peer,
                        key,
                        dtype=_dtype_name(tensor.dtype),
                        shape=tuple(state.shape),
                        payload=_raw(state),
                        is_move=save.is_move,
                    )
            self.io.finish(save.transfer_id, peer, save.is_move)
            self._sends[save.req_id] = save.transfer_id

    # --- completions ---------------------------------------------------------------------

    def results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        self._finished |= finished_req_ids
        out = KVConnectorTransferResults()
        for req_id, transfer_id in list(self._sends.items()):
            if req_id in self._finished and self.io.is_done(transfer_id):
                out.finished_sending.add(req_id)
                del self._sends[req_id]
                self._finished.discard(req_id)
                self.io.forget(transfer_id)
        self._finished -= {r for r in self._finished if r not in self._sends}
        now = time.monotonic()
        for transfer_id, since in list(self._discards.items()):
            if self.io.poll_arrival(transfer_id) is not None:
                self.io.discard(transfer_id)
            elif now - since < self._settings.staged_ttl_s:
                continue
            del self._discards[transfer_id]
        for req_id, (load, since) in list(self._loads.items()):
            arrival = self.io.poll_arrival(load.transfer_id)
            if arrival is None and now - since < self._settings.load_timeout_s:
                continue
            del self._loads[req_id]
            out.finished_recving.add(req_id)
            if arrival is None or not arrival[0] or not self._load(load):
                out.failed_recving.add(req_id)
                self._load_errors |= self._attention_blocks(load)
        return out

    def take_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def _attention_blocks(self, load: LoadSpec) -> set[int]:
        ids: set[int] = set()
        for group, is_mamba in enumerate(self._is_mamba):
            if is_mamba:
                continue
            logical = self._groups[group].kv_cache_spec.block_size
            first, last = load.start // logical, math.ceil(load.end / logical)
            ids.update(load.block_ids[group][first:last])
        return ids

    # --- decode: load --------------------------------------------------------------------

    def _load(self, load: LoadSpec) -> bool:
        """Copy the transfer's slices into the request's blocks; False if anything lacks."""
        slices = self.io.claim(load.transfer_id)
        by_index: dict[int, list[tuple[SliceKey, Any, bytes]]] = {}
        for key, (meta, data) in slices.items():
            by_index.setdefault(key.layer, []).append((key, meta, data))
        for name in self._layer_order:
            group = self._group_of[name]
            for index, tensor in self._tensors[name]:
                got = by_index.get(index, [])
                if self._is_mamba[group]:
                    if not self._load_state(load, group, tensor, got):
                        return False
                elif not self._load_attention(load, name, group, tensor, got):
                    return False
        return True

    def _load_state(self, load: LoadSpec, group: int, tensor: torch.Tensor, got: list[Any]) -> bool:
        states = [(k, d) for k, _, d in got if k.token_start == k.token_end == load.end]
        block_tokens = self._groups[group].kv_cache_spec.block_size
        state_block = _state_block(load.block_ids[group], block_tokens, load.end)
        if len(states) != 1 or state_block is None:
            return False
        target = tensor[state_block]
        data = torch.frombuffer(bytearray(states[0][1]), dtype=torch.uint8)
        if data.numel() != target.numel() * target.element_size():
            return False
        target.copy_(data.view(tensor.dtype).view(target.shape))
        return True

    def _load_attention(
        self, load: LoadSpec, name: str, group: int, tensor: torch.Tensor, got: list[Any]
    ) -> bool:
        logical = self._groups[group].kv_cache_spec.block_size
        per_block = self._kernel_blocks(name, tensor)
        ids = load.block_ids[group]
        covered = load.start
        for key, _, data in sorted(got, key=lambda item: item[0].token_start):
            if key.token_end <= load.start:
                continue  # the decode side holds this block already
            if key.token_start > covered:
                return False
            base = ids[key.token_start // logical] * per_block
            rows = tensor[base : base + per_block]
            if len(data) != rows.numel() * rows.element_size():
                return False
            rows.copy_(
                torch.frombuffer(bytearray(data), dtype=torch.uint8)
                .view(rows.dtype)
                .view(rows.shape)
            )
            covered = max(covered, key.token_end)
        return covered >= load.end

    def close(self) -> None:
        self.io.close()


def _raw(tensor: torch.Tensor) -> memoryview:
    """The tensor's bytes; zero-copy when it is contiguous (the cache block itself)."""
    flat = tensor.contiguous().view(-1).view(torch.uint8)
    return memoryview(flat.numpy())
