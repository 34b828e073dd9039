"""`serve.backends.event_log.EventLog`, the one cache event log of every backend: numbers go
up by one per event, `since(n)` is exactly the kept events from n on, and past its capacity
the log drops the oldest and shows it (the first event's number above the one asked)."""

from __future__ import annotations

import threading
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.kvcache import BlockHash, BlockRemoved, BlockStored, CacheEvent, InstanceId
from prfaas.serve.backends.event_log import EventLog

INSTANCE = InstanceId("pdd-0")


def _event(k: int) -> CacheEvent:
    kind = BlockStored if k % 3 else BlockRemoved
    return kind(INSTANCE, k % 2, BlockHash(k))


BATCHES = st.lists(st.integers(min_value=0, max_value=40), max_size=12)


def _filled(capacity: int, batches: list[int]) -> tuple[EventLog, list[CacheEvent]]:
    log, appended = EventLog(capacity), []
    for size in batches:
        batch = [_event(len(appended) + i) for i in range(size)]
        log.extend(batch)
        appended += batch
    return log, appended


@given(capacity=st.integers(min_value=1, max_value=64), batches=BATCHES, asked=st.integers(-5, 600))
def test_since_returns_exactly_the_kept_events_from_n_on(
    capacity: int, batches: list[int], asked: int
) -> None:
    log, appended = _filled(capacity, batches)
    events, next_seq = log.since(asked)
    assert next_seq == len(appended)
    oldest_kept = max(0, len(appended) - capacity)
    first = max(asked, oldest_kept)
    assert [e.seq for e in events] == list(range(first, len(appended)))
    assert [e.event for e in events] == appended[first:]


@given(capacity=st.integers(min_value=1, max_value=64), batches=BATCHES)
def test_numbers_go_up_by_one_and_the_oldest_fall_off_visibly(
    capacity: int, batches: list[int]
) -> None:
    log, appended = _filled(capacity, batches)
    events, _ = log.since(0)
    seqs = [e.seq for e in events]
    assert all(b == a + 1 for a, b in pairwise(seqs))
    assert len(events) == min(capacity, len(appended))
    if len(appended) > capacity:  # dropped: a reader from 0 sees its first number above 0
        assert seqs[0] == len(appended) - capacity > 0


def test_appends_from_another_thread_are_numbered_once_each() -> None:
    """The torch backend appends on its engine thread while `/state` reads on the loop."""
    log = EventLog(10_000)
    writers = [
        threading.Thread(target=log.extend, args=([_event(k) for k in range(500)],))
        for _ in range(4)
    ]
    for writer in writers:
        writer.start()
    seen = [log.since(0) for _ in range(50)]
    for writer in writers:
        writer.join()
    events, next_seq = log.since(0)
    assert next_seq == 2000 and [e.seq for e in events] == list(range(2000))
    for partial, upto in seen:
        assert [e.seq for e in partial] == list(range(upto))


def test_a_log_keeps_at_least_one_event() -> None:
    with pytest.raises(ValueError):
        EventLog(0)
