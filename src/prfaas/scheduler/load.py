"""Load counted at dispatch time, and the two instance choices built on it.

`DispatchLedger` records every dispatch the moment it is decided and forgets it when the host
reports the stage done, so two requests arriving back to back never both see an idle instance
(routers acting on stale instance counters: SGLang PR #27547). Prefill load is estimated seconds of
queued prefill work; decode load is dispatched requests and reserved KV bytes.

Prefill choice: cache affinity with bounded load. An instance's finish time for the request is
its queued work plus the request's prefill on it (shorter where its cache hits). Among
instances finishing within (1 + epsilon) of the earliest, take the longest prefix hit; ties to
the earliest finish, then the id. Affinity may cost at most epsilon of latency, so the hot
instance is never piled onto: once its queue is long enough, a colder instance wins.

Other routers' load: several router replicas share the instances, and each ledger sees only
its own dispatches. `set_foreign` adds what an instance reports of the other routers' work
on it (prefill seconds queued, decodes running: `serve.router.registry`), so every replica
weighs the whole load; a single router, and the simulator, never set it.

Decode choice: among the candidates whose KV receive buffer has room (`has_receive_room`,
as they last reported it; all of them when none has), the least loaded by dispatched
requests over BS_max among those with enough free KV memory; if none has room, the one with
most free memory (the request waits there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler.view import InstanceView


@dataclass(frozen=True, slots=True)
class DecodeOverlap:
    """What `DispatchLedger.decode_overlap` found: `count` requests whose windows meet the
    query, `peak` of them at once at most, `context_tokens` their contexts summed."""

    peak: int
    count: int
    context_tokens: int


@dataclass(slots=True)
class _Entry:
    prefill_instance_id: InstanceId
    prefill_work_s: float
    decode_instance_id: InstanceId
    kv_bytes: float
    first_token_s: float  # predicted at dispatch (absolute time)
    decode_end_s: float  # predicted at dispatch: first token + output x a full batch's step
    context_tokens: int  # the mean context over its decode: prompt + half its output
    is_prefilling: bool = True


class DispatchLedger:
    """Outstanding work per instance, updated at dispatch and at stage completion."""

    def __init__(self) -> None:
        self._entries: dict[RequestId, _Entry] = {}
        self._prefill_s: dict[InstanceId, float] = {}
        self._decode_requests: dict[InstanceId, int] = {}
        self._decode_kv_bytes: dict[InstanceId, float] = {}
        self._by_decode: dict[InstanceId, set[RequestId]] = {}
        self._foreign_prefill_s: dict[InstanceId, float] = {}
        self._foreign_decodes: dict[InstanceId, int] = {}

    def set_foreign(self, instance_id: InstanceId, prefill_work_s: float, decodes: int) -> None:
        """Other routers' work on `instance_id` as the instance reported it last (replaces
        the previous report): queued prefill seconds and decode requests."""
        self._foreign_prefill_s[instance_id] = max(0.0, prefill_work_s)
        self._foreign_decodes[instance_id] = max(0, decodes)

    def prefill_estimate_s(self, request_id: RequestId) -> float:
        """The prefill seconds counted for a dispatched request (0 when it is not here)."""
        entry = self._entries.get(request_id)
        return entry.prefill_work_s if entry is not None else 0.0

    def dispatch(
        self,
        request_id: RequestId,
        prefill_instance_id: InstanceId,
        prefill_work_s: float,
        decode_instance_id: InstanceId,
        kv_bytes: float,
        *,
        first_token_s: float = 0.0,
        decode_end_s: float = 0.0,
        context_tokens: int = 0,
    ) -> None:
        """`first_token_s` / `decode_end_s`: when the request is predicted to take a decode
        slot and to leave it (absolute times); `context_tokens`: its mean context meanwhile.
        Only `decode_overlap` reads the three."""
        if request_id in self._entries:
            raise KeyError(f"request {request_id} dispatched twice")
        self._entries[request_id] = _Entry(
            prefill_instance_id,
            prefill_work_s,
            decode_instance_id,
            kv_bytes,
            first_token_s,
            decode_end_s,
            context_tokens,
        )
        self._by_decode.setdefault(decode_instance_id, set()).add(request_id)
        self._add_prefill(prefill_instance_id, prefill_work_s)
        self._decode_requests[decode_instance_id] = (
            self._decode_requests.get(decode_instance_id, 0) + 1
        )
        self._decode_kv_bytes[decode_instance_id] = self.decode_kv_bytes(decode_instance_id) + (
            kv_bytes
        )

    def prefill_done(self, request_id: RequestId) -> None:
        entry = self._entries[request_id]
        if not entry.is_prefilling:
            raise KeyError(f"request {request_id}: prefill reported done twice")
        entry.is_prefilling = False
        self._add_prefill(entry.prefill_instance_id, -entry.prefill_work_s)

    def decode_done(self, request_id: RequestId) -> None:
        entry = self._entries.pop(request_id)
        decode = entry.decode_instance_id
        self._by_decode[decode].discard(request_id)
        if entry.is_prefilling:
            self._add_prefill(entry.prefill_instance_id, -entry.prefill_work_s)
        self._decode_requests[decode] -= 1
        self._decode_kv_bytes[decode] -= entry.kv_bytes

    def prefill_work_s(self, instance_id: InstanceId) -> float:
        own = self._prefill_s.get(instance_id, 0.0)
        return own + self._foreign_prefill_s.get(instance_id, 0.0)

    def decode_requests(self, instance_id: InstanceId) -> int:
        own = self._decode_requests.get(instance_id, 0)
        return own + self._foreign_decodes.get(instance_id, 0)

    def decode_overlap(
        self, instance_id: InstanceId, start_s: float, end_s: float, now_s: float
    ) -> DecodeOverlap:
        """`instance_id`'s dispatched requests whose predicted decode windows meet
        [start_s, end_s): how many, the most holding a slot at once, their contexts summed.

        A request past its prefill holds its slot from now on (it decodes or waits for one);
        a prefill running late starts its decode now at the earliest; a decode running past
        its predicted end holds its slot until it is reported done; other routers' decodes
        (`set_foreign`) hold theirs over the whole query."""
        changes: list[tuple[float, int]] = []
        foreign = self._foreign_decodes.get(instance_id, 0) if start_s < end_s else 0
        contexts = 0
        for rid in self._by_decode.get(instance_id, ()):
            e = self._entries[rid]
            first_s = max(e.first_token_s, now_s) if e.is_prefilling else now_s
            last_s = e.decode_end_s if e.decode_end_s > now_s else math.inf
            begin_s, finish_s = max(first_s, start_s), min(last_s, end_s)
            if begin_s < finish_s:
                changes += [(begin_s, 1), (finish_s, -1)]
                contexts += e.context_tokens
        peak = taken = foreign
        for _, step in sorted(changes):  # half-open: a slot left at t is free for one taken at t
            taken += step
            peak = max(peak, taken)
        return DecodeOverlap(peak, len(changes) // 2 + foreign, contexts)

    def decode_kv_bytes(self, instance_id: InstanceId) -> float:
        return self._decode_kv_bytes.get(instance_id, 0.0)

    def __len__(self) -> int:
        return len(self._entries)

    def _add_prefill(self, instance_id: InstanceId, work_s: float) -> None:
        # Clamp float dust so an idle instance reads exactly 0.
        total = self._prefill_s.get(instance_id, 0.0) + work_s
        self._prefill_s[instance_id] = total if total > 1e-9 else 0.0


def choose_prefill(
    candidates: Sequence[InstanceView],
    hit_tokens: Callable[[InstanceView], int],
    work_s: Callable[[InstanceView], float],
    ledger: DispatchLedger,
    load_slack: float,
) -> InstanceView:
    """Longest hit among instances within the load bound; see the module docstring."""
    if not candidates:
        raise ValueError("no candidate prefill instance")
    finish = {c.instance_id: ledger.prefill_work_s(c.instance_id) + work_s(c) for c in candidates}
    bound_s = (1.0 + load_slack) * min(finish.values())
    within = [c for c in candidates if finish[c.instance_id] <= bound_s]
    return min(within, key=lambda c: (-hit_tokens(c), finish[c.instance_id], c.instance_id))


def choose_decode(
    candidates: Sequence[InstanceView], kv_bytes: float, ledger: DispatchLedger
) -> InstanceView | None:
    """Least loaded decode instance with room for `kv_bytes`; see the module docstring."""
    if not candidates:
        return None
    candidates = [c for c in candidates if c.has_receive_room] or candidates
    free = [(c.kv_capacity_bytes - ledger.decode_kv_bytes(c.instance_id), c) for c in candidates]
    roomy = [(f, c) for f, c in free if f >= kv_bytes]
    if not roomy:
        return max(free, key=lambda fc: (fc[0], fc[1].instance_id))[1]
    return min(
        roomy,
        key=lambda fc: (
            ledger.decode_requests(fc[1].instance_id) / max(1, fc[1].max_batch_size),
            -fc[0],
            fc[1].instance_id,
        ),
    )[1]
