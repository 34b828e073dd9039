"""`PrfaasConnector`: vLLM's KV connector API over prfaas's transfer layer.

Loaded by vLLM from outside its tree:

    --kv-transfer-config '{"kv_connector": "PrfaasConnector",
        "kv_connector_module_path": "prfaas.integrations.vllm.connector",
        "kv_role": "kv_both", "kv_connector_extra_config": {...}}'   (`ConnectorSettings`)

A request opts in through its `kv_transfer_params` (the prfaas instance shell sets them):

    prefill: {"prfaas_send": {"transfer_id", "host", "port", "from_token", "move"}},
             max_tokens 1 ("move": a cache move, paced as the link: `VllmBackend.export_prefix`)
             -> the response's kv_transfer_params {"prfaas_transfer_id", "prfaas_num_tokens",
                "prfaas_kv_bytes", "prfaas_from_token"}
    decode:  {"prfaas_recv": {"transfer_id"}}, prompt = the prefill's prompt + its token
    drop:    {"prfaas_recv": {"transfer_id", "discard": true}}: the staged transfer is not
             needed (the request ended at its first token)

Prefill side (push, layer-wise). Each scheduler step, the scheduler half names the blocks of
every sending request that this step completes (`SaveSpec`: full blocks as they fill, the
partial tail on the last step, from `from_token` on: what the decode side lacks); the worker
half ships each attention layer's blocks from `save_kv_layer` as soon as that layer wrote
them, zero-copy from vLLM's cache tensors, one slice per layer per step (the worker half:
`connector_worker`; the step's `PrfaasMetadata`: `metadata`). Linear-attention /
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from vllm.v1.kv_cache_interface import (
    AttentionSpec,
    MambaSpec,
)

from prfaas.integrations.vllm.connector_worker import ConnectorWorker
from prfaas.integrations.vllm.metadata import LoadSpec, PrfaasMetadata, SaveSpec
from prfaas.integrations.vllm.settings import ConnectorSettings

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request


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
            self._worker = ConnectorWorker(
                self._settings, vllm_config, self._groups, self._is_mamba
            )

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
        """Payload bytes a transfer carries: what the worker half ships, counted from the specs."""
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
