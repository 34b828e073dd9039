"""An instance's `GET /state`: load, cache events, link telemetry, and what it holds.

Built from the instance's runtime (`runtime`); the router polls it (`serve.router.registry`).
`resources` counts what requests in progress hold on this instance, so an operator (and the
tests) can see that every request's pages, transfers and calls are released once it is over,
however it ended (docs/serving.md, "What a request holds and when it is released"):

    held_pages          engine pool pages referenced by requests (cached prefix pages are
                        evictable, not held)
    receive_pages_free  pages free in the KV receive buffer (`ArraySink`), of receive_pages
    unclaimed_kv        requests whose KV arrived and waits for its decode (`kv_claims`)
    incoming_transfers  transfers arriving (receiver), outgoing_transfers being sent (sender)
    running_calls       prefill calls in progress that `/cancel` can end
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prfaas.kvcache import BlockStored
from prfaas.serve import protocol as p
from prfaas.serve.backends.interface import own_kv_links
from prfaas.transfer import LinkSignals

if TYPE_CHECKING:
    from prfaas.serve.instance.runtime import InstanceRuntime


def state_body(rt: InstanceRuntime, since: int) -> bytes:
    """`GET /state?since=N` as sent: serialized once here, not validated again on the way
    out (the route returns these bytes: no second pydantic pass per poll)."""
    return instance_state(rt, since).model_dump_json().encode()


def instance_state(rt: InstanceRuntime, since: int) -> p.InstanceState:
    """The body of `GET /state?since=N` (cache events from sequence number N on, as rows:
    `protocol.CacheEventRow`)."""
    events, next_seq = rt.backend.events_since(since)
    return p.InstanceState(
        boot_id=rt.info.boot_id,
        role=rt.spec.role.value,
        prefill_busy_s=rt.activity.prefill_busy_s,
        active_prefills=rt.activity.prefills,
        active_decodes=rt.activity.decodes,
        num_waiting=rt.backend.num_waiting,
        num_running=rt.backend.num_running,
        free_pages=rt.backend.free_pages,
        events=[
            (
                e.seq,
                isinstance(e.event, BlockStored),
                e.event.group_index,
                e.event.block_hash,
                e.event.medium,
            )
            for e in events
        ],
        next_seq=next_seq,
        link_up=rt.link_probe.has_route() if rt.link_probe is not None else None,
        links=[
            p.LinkBody(
                peer=link.peer,
                egress_bytes_per_s=link.egress_bytes_per_s,
                bytes_waiting=link.bytes_waiting,
                bytes_in_flight=link.bytes_in_flight,
                bytes_acked_total=link.bytes_acked_total,
                rtt_s=link.rtt_s,
            )
            for link in _link_signals(rt)
        ],
        resources=resources(rt),
        disk_tier=_disk_tier(rt),
        lease=rt.lease.answer(rt.lease.clock()),
        draining=rt.lease.is_draining(rt.lease.clock()),
        load_by_router={r: load.model_copy() for r, load in rt.activity.by_router.items()},
    )


def resources(rt: InstanceRuntime) -> p.ResourcesBody:
    """What requests in progress hold here (see the module docstring)."""
    kv = rt.kv
    return p.ResourcesBody(
        held_pages=rt.backend.held_pages,
        receive_pages=kv.sink.num_pages if kv is not None else 0,
        receive_pages_free=kv.sink.num_free_pages if kv is not None else 0,
        unclaimed_kv=rt.claims.num_unclaimed if rt.claims is not None else 0,
        incoming_transfers=kv.receiver.num_active_requests if kv is not None else 0,
        outgoing_transfers=sum(s.num_active_transfers for s in kv.senders) if kv else 0,
        running_calls=len(rt.calls),
    )


def _disk_tier(rt: InstanceRuntime) -> p.DiskTierBody | None:
    counters = rt.backend.disk_tier
    if counters is None:
        return None
    return p.DiskTierBody(
        demoted_bytes=counters.demoted_bytes,
        promoted_bytes=counters.promoted_bytes,
        failed_demotions=counters.failed_demotions,
    )


def _link_signals(rt: InstanceRuntime) -> list[LinkSignals]:
    links = own_kv_links(rt.backend)
    if links is not None:
        return links.link_signals()
    return rt.kv.sender.link_signals() if rt.kv is not None else []
