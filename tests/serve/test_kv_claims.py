"""Issue 26 item 1, the decode side: KV that arrives for a request is claimed, dropped or
expired, so the receive buffer never keeps a request that is over (`serve.instance.kv_claims`).

Before the ledger, only a `/decode` call released a request's KV: KV that arrived after its
client left (the router never called `/decode`), or after its decode call gave up, stayed
in the `ArraySink` for good. The clock is a number the tests move; no wall time is read.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.serve.errors import InstanceFailedError
from prfaas.serve.instance.kv_claims import KvClaims
from prfaas.transfer import ArraySink, RequestId, SliceKey, SliceMeta

PAGE_BYTES = 1024
TTL_S = 60.0


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _ledger() -> tuple[KvClaims, ArraySink, Clock]:
    sink = ArraySink(64 * PAGE_BYTES, page_bytes=PAGE_BYTES)
    clock = Clock()
    return KvClaims(sink, TTL_S, clock), sink, clock


def _commit(sink: ArraySink, request_id: str, nbytes: int = 3 * PAGE_BYTES) -> None:
    """What the receiver does for a transfer that arrived whole: pages, then commit."""
    meta = SliceMeta(SliceKey(0, 0, 0, 16), "uint8", (nbytes,), nbytes)
    views = sink.allocate(RequestId(request_id), meta)
    assert views is not None
    sink.commit(RequestId(request_id))


def _arrive(claims: KvClaims, sink: ArraySink, request_id: str) -> None:
    _commit(sink, request_id)
    claims.arrived(request_id)


def test_a_claim_gets_the_slices_and_the_pages_go_back() -> None:
    claims, sink, _ = _ledger()
    _arrive(claims, sink, "r1")
    assert sink.num_free_pages == sink.num_pages - 3 and claims.num_unclaimed == 1
    arrived = asyncio.run(claims.claim("r1", timeout_s=1.0))
    assert [s.nbytes for s in arrived.slices] == [3 * PAGE_BYTES]
    assert arrived.prompt_token_ids is None  # none was sent with it
    assert sink.num_free_pages == sink.num_pages and claims.num_unclaimed == 0


def test_a_claim_gets_the_prompt_that_came_with_the_kv() -> None:
    claims, sink, _ = _ledger()
    _commit(sink, "r1")
    claims.arrived("r1", prompt_token_ids=(257, 7, 2**32 - 1))
    arrived = asyncio.run(claims.claim("r1", timeout_s=1.0))
    assert arrived.prompt_token_ids == (257, 7, 2**32 - 1)


def test_kv_that_arrives_after_its_request_was_dropped_is_released_at_once() -> None:
    """The issue's case: the client left mid-prefill, the router's /cancel came first."""
    claims, sink, _ = _ledger()
    claims.drop("r1")
    _arrive(claims, sink, "r1")
    assert sink.num_free_pages == sink.num_pages and claims.num_unclaimed == 0


def test_dropping_kv_that_arrived_releases_it() -> None:
    claims, sink, _ = _ledger()
    _arrive(claims, sink, "r1")
    claims.drop("r1")
    assert sink.num_free_pages == sink.num_pages


def test_kv_that_lands_after_its_claim_gave_up_is_released() -> None:
    """A decode call cancelled while it waited (its client left): the KV that lands later
    used to be held for ever."""
    claims, sink, _ = _ledger()

    async def run() -> None:
        waiting = asyncio.create_task(claims.claim("r1", timeout_s=30.0))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        _arrive(claims, sink, "r1")

    asyncio.run(run())
    assert sink.num_free_pages == sink.num_pages


def test_a_waiting_claim_fails_when_its_request_is_dropped_or_aborted() -> None:
    claims, _, _ = _ledger()

    async def run(end: str) -> None:
        waiting = asyncio.create_task(claims.claim(end, timeout_s=30.0))
        await asyncio.sleep(0)
        if end == "dropped":
            claims.drop(end)
        else:
            claims.aborted(end, "out_of_space: no pages")
        with pytest.raises(InstanceFailedError, match=r"cancelled|out_of_space"):
            await waiting

    asyncio.run(run("dropped"))
    asyncio.run(run("aborted"))


def test_unclaimed_kv_is_released_after_its_lifetime_and_not_before() -> None:
    claims, sink, clock = _ledger()
    _arrive(claims, sink, "r1")
    clock.now_s = TTL_S - 1
    assert claims.expire() == 0 and claims.num_unclaimed == 1
    clock.now_s = TTL_S
    assert claims.expire() == 1
    assert sink.num_free_pages == sink.num_pages and claims.num_unclaimed == 0


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "drop", "claim", "abort", "tick"]),
        st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(EVENTS)
def test_whatever_happens_every_page_is_back_once_every_request_is_over(
    events: list[tuple[str, int]],
) -> None:
    """Any order of arrivals, drops, claims, aborts and time: once every request has
    ended (claimed or dropped) and the lifetime passed, the sink is whole and the ledger
    empty. A claim is made only for KV that arrived (one that waits is tested above)."""
    claims, sink, clock = _ledger()
    for kind, n in events:
        rid = f"r{n}"
        if kind == "arrive" and not _held(sink, rid):
            _arrive(claims, sink, rid)
        elif kind == "drop":
            claims.drop(rid)
        elif kind == "abort":
            claims.aborted(rid, "stalled")
        elif kind == "claim" and _held(sink, rid):
            with contextlib.suppress(InstanceFailedError):
                asyncio.run(claims.claim(rid, timeout_s=0.0))
        elif kind == "tick":
            clock.now_s += TTL_S / 3
            claims.expire()
    for n in range(4):
        claims.drop(f"r{n}")
    clock.now_s += TTL_S
    claims.expire()
    assert sink.num_free_pages == sink.num_pages
    assert claims.num_unclaimed == 0 and claims.expire() == 0


def _held(sink: ArraySink, request_id: str) -> bool:
    try:
        sink.committed(RequestId(request_id))
    except KeyError:
        return False
    return True
