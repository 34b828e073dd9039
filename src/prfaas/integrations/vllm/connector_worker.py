"""The worker half of `PrfaasConnector`: vLLM's cache tensors, shipping and loading.

Runs in vLLM's model-runner thread (docs: `integrations.vllm.connector`, which makes one per
worker): `register` learns the cache tensors; each step `begin_step` starts the loads the
metadata names, `save_layer` ships a layer's blocks as soon as vLLM wrote them (zero-copy
from the cache tensors), `end_step` ships the mamba states and finishes the transfers, and
`results` tells vLLM which sends and loads are done. The transfers themselves run on
`TransferIO`'s event loop thread, built from the deployment's shipping plan.
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
from vllm.v1.attention.backends.utils import NULL_BLOCK_ID
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)

from prfaas.integrations.vllm.metadata import LoadSpec, PrfaasMetadata, SaveSpec
from prfaas.integrations.vllm.settings import ConnectorSettings
from prfaas.transfer import PeerAddress, SliceKey

if TYPE_CHECKING:
    from vllm.config import VllmConfig


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
    router's KV with (`serve.backends.vllm.arch.layout_mismatch`). The kind is the spec class
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


class ConnectorWorker:
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
