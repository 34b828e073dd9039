"""Turning a path choice into a full decision: prefill instance, decode instance, reuse.

Shared by every routing policy so that they differ only in *which path* and *how much cache
they look at*, never in how an instance is picked (a fair comparison of policies).
"""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.decisions import (
    BandwidthMode,
    CacheMove,
    Reason,
    Rejection,
    RejectReason,
    RouteDecision,
    ServePath,
)
from prfaas.scheduler.load import DispatchLedger, choose_decode, choose_prefill
from prfaas.scheduler.view import ClusterView, InstanceView, Role, RouteRequest

PATH_ROLE = {ServePath.PRFAAS: Role.PRFAAS, ServePath.PD_P: Role.PD_PREFILL}


@dataclass(frozen=True, slots=True)
class PathChoice:
    """A policy's verdict before placement. `is_cache_aware` False makes instance choice blind
    to prefix hits (the fixed-threshold baseline); `moved_tokens` is a prefix the decision moves
    across clusters (with `cache_move`), which every instance of the target cluster then holds."""

    path: ServePath
    reason: Reason
    mode: BandwidthMode | None = None
    is_cache_aware: bool = True
    cache_move: CacheMove | None = None


def best_hit(request: RouteRequest, instances: tuple[InstanceView, ...]) -> tuple[int, int]:
    """(hit tokens, index) of the instance with the longest restorable prefix; (0, -1) if none."""
    best, index = 0, -1
    if not request.hit_tokens:
        return best, index  # no prefix anywhere (the common case without caching)
    for i, inst in enumerate(instances):
        hit = request.hit_on(inst.instance_id)
        if hit > best:
            best, index = hit, i
    return best, index


def place(
    request: RouteRequest,
    view: ClusterView,
    ledger: DispatchLedger,
    config: SchedulerConfig,
    choice: PathChoice,
) -> RouteDecision | Rejection:
    """Pick the instances for `choice`; reject when a stage has no instance at all."""
    candidates = view.accepting(PATH_ROLE[choice.path])
    if not candidates:
        return Rejection(request.request_id, RejectReason.NO_PREFILL_INSTANCE)
    kv_bytes = config.kv_bytes(request.input_tokens + request.output_tokens)
    decode = choose_decode(view.accepting(Role.PD_DECODE), kv_bytes, ledger)
    if decode is None:
        return Rejection(request.request_id, RejectReason.NO_DECODE_INSTANCE)
    moved = choice.cache_move.tokens if choice.cache_move is not None else 0
    on_prfaas = choice.path is ServePath.PRFAAS
    if not request.hit_tokens and moved == 0:
        # Nothing cached anywhere: every candidate computes the whole prompt (same choice as
        # the general path below, without evaluating it per candidate).
        cold_s = config.prefill_s(on_prfaas, request.input_tokens)
        cold = choose_prefill(candidates, _no_hit, lambda _: cold_s, ledger, config.load_slack)
        return _decision(request, choice, cold, decode, 0)

    def reused(inst: InstanceView) -> int:
        local = request.hit_on(inst.instance_id)
        return max(local, moved) if choice.is_cache_aware else local

    def work_s(inst: InstanceView) -> float:
        blind = 0 if not choice.is_cache_aware else reused(inst)
        return config.prefill_s(on_prfaas, request.input_tokens - blind)

    def hit(inst: InstanceView) -> int:
        return reused(inst) if choice.is_cache_aware else 0

    prefill = choose_prefill(candidates, hit, work_s, ledger, config.load_slack)
    return _decision(request, choice, prefill, decode, reused(prefill))


def _no_hit(_: InstanceView) -> int:
    return 0


def _decision(
    request: RouteRequest,
    choice: PathChoice,
    prefill: InstanceView,
    decode: InstanceView,
    reuse: int,
) -> RouteDecision:
    return RouteDecision(
        request_id=request.request_id,
        path=choice.path,
        prefill_instance_id=prefill.instance_id,
        decode_instance_id=decode.instance_id,
        reused_prefix_tokens=reuse,
        uncached_tokens=request.input_tokens - reuse,
        reason=choice.reason,
        mode=choice.mode,
        cache_move=choice.cache_move,
    )
