"""A router replica's copy of an instance's cache events (`Registry._fold_events`): events
travel as rows (`protocol.CacheEventRow`), and a replica that missed some (the instance's
log dropped them before it asked: it joined late, or was away longer than the log holds)
resyncs: it forgets what it knew of that instance and learns again, so its index never
claims a block the instance dropped, and its polls go on (the old registry kept the stale
entries, or failed every poll after a removal it could not fold)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_helpers import fake_info

from prfaas.kvcache import BlockHash, BlockRemoved, BlockStored, InstanceId, Medium
from prfaas.serve import protocol as p
from prfaas.serve.backends.event_log import EventLog
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

NAME = "pdd-0"
INSTANCE = InstanceId(NAME)


def _deployment() -> Deployment:
    spec = InstanceSpec(name=NAME, role=InstanceRole.PD_DECODE, cluster="pd", http_port=8101)
    return Deployment(instances=(spec,))


@dataclass
class FakeInstance:
    """An instance's pool (the blocks it holds) and its event log, served as `/state`."""

    log: EventLog
    held: set[int] = field(default_factory=set)
    num_waiting: int = 0

    def store(self, block: int) -> None:
        self.held.add(block)
        self.log.extend([BlockStored(INSTANCE, 0, BlockHash(block))])

    def remove(self, block: int) -> None:
        self.held.discard(block)
        self.log.extend([BlockRemoved(INSTANCE, 0, BlockHash(block))])

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/info":
            info = fake_info(NAME)
            cache = info.cache.model_copy(update={"group_kinds": ["attention"]})
            info = info.model_copy(update={"cache": cache})
            return httpx.Response(200, content=info.model_dump_json())
        events, next_seq = self.log.since(int(request.url.params["since"]))
        rows = [
            [e.seq, isinstance(e.event, BlockStored), 0, e.event.block_hash, "dram"] for e in events
        ]
        body = {"boot_id": "b", "num_waiting": self.num_waiting, "num_running": 0,
                "free_pages": 1, "events": rows, "next_seq": next_seq}  # fmt: skip
        return httpx.Response(200, content=json.dumps(body))


BLOCKS = range(1, 8)  # every block a test stores


def _indexed(registry: Registry) -> set[int]:
    """The blocks the replica's index says the instance holds."""
    index = registry.index
    assert index is not None
    return {b for b in BLOCKS if index.medium_of(INSTANCE, 0, BlockHash(b)) is not None}


def _polls(
    instance: FakeInstance, steps: list[list[int] | None]
) -> tuple[Registry, list[set[int]]]:
    """Run `steps` against a replica: a list of blocks is pool work (a positive block is
    stored, a negative one removed), None is a poll; the index after every poll."""

    async def run() -> tuple[Registry, list[set[int]]]:
        seen: list[set[int]] = []
        async with HttpInstanceClient(transport=httpx.MockTransport(instance.handle)) as client:
            registry = Registry(_deployment(), client)
            for step in steps:
                if step is None:
                    await registry.poll_once()
                    seen.append(_indexed(registry))
                    continue
                for block in step:
                    (instance.store if block > 0 else instance.remove)(abs(block))
        return registry, seen

    return asyncio.run(run())


def test_a_late_replica_resyncs_and_its_polls_go_on() -> None:
    """It joins after the log dropped the store of block 2, whose removal is still kept:
    the old registry could not fold that removal and failed this instance's every poll
    (no events, no load figures)."""
    instance = FakeInstance(EventLog(capacity=2), num_waiting=3)
    for block in (1, 2):
        instance.store(block)
    instance.remove(2)
    instance.store(3)  # the log keeps only these two: remove 2 and store 3
    registry, seen = _polls(instance, [None, [4], None])
    live = registry.instances[NAME]
    assert seen == [{3}, {3, 4}]  # block 1's store was lost: a hit missed, never a false one
    assert live.num_waiting == 3 and live.next_seq == 5
    assert live.resyncs == 1 and live.is_partial
    exported = RouterMetrics().render(registry, threshold_tokens=0).decode()
    assert f'prfaas:instance_cache_resyncs{{instance="{NAME}"}} 1.0' in exported


def test_a_replica_that_misses_a_removal_forgets_the_block() -> None:
    """Between two of its polls the log drops the removal of block 2: it must not go on
    claiming block 2 (the old registry did: a stale entry that misroutes)."""
    instance = FakeInstance(EventLog(capacity=2))
    registry, seen = _polls(instance, [[1, 2], None, [-2, 5, 6], None, [-1, 7], None])
    # block 1 is still held, but the replica cannot know it any more: a hit missed, never
    # a block claimed; its later removal is one it skips
    assert seen == [{1, 2}, {5, 6}, {5, 6, 7}]
    assert registry.instances[NAME].resyncs == 1


def test_no_resync_while_nothing_is_lost() -> None:
    instance = FakeInstance(EventLog(capacity=8))
    registry, seen = _polls(instance, [[1, 2, 3], None, [-2, 4], None, [-4], None])
    assert seen == [{1, 2, 3}, {1, 3, 4}, {1, 3}]
    assert registry.instances[NAME].resyncs == 0


STEPS = st.lists(
    st.one_of(st.none(), st.lists(st.integers(-7, 7).filter(bool), max_size=6)),
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(capacity=st.integers(min_value=1, max_value=12), steps=STEPS)
def test_the_index_never_claims_a_block_the_instance_dropped(
    capacity: int, steps: list[list[int] | None]
) -> None:
    """Whatever the log drops between polls: after each poll the replica's index holds only
    blocks the instance holds, and all of them when no event was lost since it joined."""
    held: set[int] = set()
    work: list[list[int] | None] = []
    truth: list[set[int]] = []  # what the instance holds at each poll
    for step in steps:
        if step is None:
            truth.append(set(held))
            work.append(None)
            continue
        real = []
        for block in step:  # a store of a held block or a removal of a missing one: no event
            if (block > 0) != (abs(block) in held):
                (held.add if block > 0 else held.discard)(abs(block))
                real.append(block)
        work.append(real)
    registry, seen = _polls(FakeInstance(EventLog(capacity)), work)
    for index, expected in zip(seen, truth, strict=True):
        assert index <= expected
    if registry.instances[NAME].resyncs == 0:
        assert seen == truth


def test_state_rows_validate_as_the_protocol_says() -> None:
    body = {"boot_id": "b", "num_waiting": 0, "num_running": 0, "free_pages": 1,
            "events": [[7, False, 0, 2**63 + 5, "disk"]], "next_seq": 8}  # fmt: skip
    state = p.InstanceState.model_validate_json(json.dumps(body))
    assert state.events == [(7, False, 0, 2**63 + 5, Medium.DISK)]
