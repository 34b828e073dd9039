"""The slow-loop lease: one instance's book (grants, expiry, fencing) and the replicas'
claims over several books, as pure state machines with the clock passed in."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from prfaas.scheduler import GlobalScheduler, PrfaasPolicy, SchedulerConfig
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec
from prfaas.serve.errors import ConflictError, StaleEpochError
from prfaas.serve.instance.lease import LeaseBook
from prfaas.serve.instance.runtime import Activity, switch_role
from prfaas.serve.profile import LiveProfile, PrefillTiming
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.lease import LeaseChange, LeaseClaim, LeaseKeeper


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def _ask(book: LeaseBook, holder: str, epoch: int, term_s: float = 6.0) -> p.LeaseAnswer:
    return book.request(p.LeaseRequest(holder=holder, epoch=epoch, term_s=term_s))


def test_a_live_grant_excludes_others_until_it_expires() -> None:
    clock = Clock()
    book = LeaseBook(clock)
    assert _ask(book, "a", 1).granted
    refused = _ask(book, "b", 2)
    assert (refused.granted, refused.holder, refused.epoch) == (False, "a", 1)
    clock.now_s += 5.0
    assert _ask(book, "a", 1).granted  # renewal: another 6 s from now
    clock.now_s += 5.0
    assert not _ask(book, "b", 2).granted
    clock.now_s += 1.5  # a's grant expired
    assert not _ask(book, "b", 1).granted  # epoch 1 was a's
    taken = _ask(book, "b", 2)
    assert (taken.granted, taken.holder, taken.epoch) == (True, "b", 2)
    assert not _ask(book, "a", 1).granted  # the old holder's renewal is stale now


def test_only_a_granted_request_publishes_its_threshold() -> None:
    book = LeaseBook(Clock())
    book.request(p.LeaseRequest(holder="a", epoch=1, threshold_tokens=300))
    book.request(p.LeaseRequest(holder="b", epoch=2, threshold_tokens=999))  # refused
    assert book.answer(book.clock()).threshold_tokens == 300


def test_a_released_grant_frees_the_instance_and_keeps_the_epoch() -> None:
    book = LeaseBook(Clock())
    _ask(book, "a", 3)
    book.release(p.LeaseRequest(holder="b", epoch=3))  # not b's: nothing happens
    assert book.answer(book.clock()).holder == "a"
    book.release(p.LeaseRequest(holder="a", epoch=3))
    assert book.answer(book.clock()).holder is None
    assert not _ask(book, "b", 3).granted and _ask(book, "b", 4).granted


def test_fencing_refuses_a_stale_or_missing_epoch_once_one_was_granted() -> None:
    book = LeaseBook(Clock())
    book.check_epoch(None)  # no lease yet: a single router's flip by hand
    _ask(book, "a", 2)
    book.check_epoch(2)
    for stale in (1, None):
        with pytest.raises(StaleEpochError) as err:
            book.check_epoch(stale)
        assert err.value.status_code == 409 and err.value.code == "stale_epoch"


def _runtime(role: InstanceRole) -> Any:
    spec = InstanceSpec(name="pdd-0", role=role, cluster="pd")
    info = SimpleNamespace(model_copy=lambda update: SimpleNamespace(**update))
    return SimpleNamespace(spec=spec, info=info, activity=Activity(), lease=LeaseBook(Clock()))


def test_an_instance_refuses_a_flip_of_an_older_epoch_and_records_the_ones_it_makes() -> None:
    rt = _runtime(InstanceRole.PD_DECODE)
    _ask(rt.lease, "old", 1)
    rt.lease.clock.now_s += 10.0
    _ask(rt.lease, "new", 2)
    with pytest.raises(StaleEpochError):
        switch_role(rt, p.RoleRequest(role="pd-prefill", epoch=1))
    assert rt.spec.role is InstanceRole.PD_DECODE and not rt.lease.switches
    switch_role(rt, p.RoleRequest(role="pd-prefill", epoch=2))
    assert rt.spec.role is InstanceRole.PD_PREFILL
    switch = rt.lease.switches[-1]
    assert (switch.epoch, switch.from_role, switch.to_role) == (2, "pd-decode", "pd-prefill")


def _answer(granted: bool, epoch: int) -> p.LeaseAnswer:
    return p.LeaseAnswer(granted=granted, epoch=epoch)


def test_a_claim_is_held_until_send_time_plus_term_minus_margin() -> None:
    claim = LeaseClaim("r", num_voters=3, term_s=6.0, margin_s=1.0)
    assert claim.next_epoch(0.0) == 1
    change = claim.settle(10.0, 1, [_answer(True, 1), _answer(True, 1), None], now_s=10.2)
    assert change is LeaseChange.ACQUIRED
    assert claim.is_held(14.9) and not claim.is_held(15.0)
    assert claim.next_epoch(12.0) == 1  # renew at our own epoch
    lost = claim.settle(12.0, 1, [_answer(True, 1), _answer(False, 4), None], now_s=12.1)
    assert lost is LeaseChange.LOST and not claim.is_held(12.1)
    assert claim.next_epoch(12.1) == 5  # above the highest any instance reported


# --- the property: replicas over instances, with delays and expiry -----------------------

TERM_S, MARGIN_S = 6.0, 1.0
_ops = st.lists(
    st.tuples(
        st.integers(0, 2),  # which replica runs a round
        st.floats(0.0, 3.0),  # time before the round is sent
        st.lists(st.floats(0.0, 0.9), min_size=3, max_size=3),  # each instance's delay
        st.lists(st.booleans(), min_size=3, max_size=3),  # whether each answer arrives
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(_ops)
def test_replicas_never_both_hold_and_epochs_only_rise(ops: list[Any]) -> None:
    """Three replicas run rounds against three instances, in any order, with any delays
    (each instance answers at its own time, every answer may be lost): at no time do two
    replicas believe they hold the lease; each instance's epoch only rises and each epoch
    goes to one holder; a replica that holds it holds the epoch of a majority's grants."""
    clock = Clock()
    books = [LeaseBook(clock) for _ in range(3)]
    claims = [LeaseClaim(f"r{i}", 3, TERM_S, MARGIN_S) for i in range(3)]
    owners: dict[tuple[int, int], str] = {}  # (instance, epoch) -> the one holder granted
    for replica, wait_s, delays, arrives in ops:
        clock.now_s += wait_s
        claim, sent_s = claims[replica], clock.now_s
        epoch = claim.next_epoch(sent_s)
        answers: list[p.LeaseAnswer | None] = []
        for index, delay_s, arrived in sorted(
            zip(range(3), delays, arrives, strict=True), key=lambda b: b[1]
        ):
            book = books[index]
            clock.now_s = sent_s + delay_s
            before = book.epoch
            answer = _ask(book, claim.holder, epoch, TERM_S)
            assert book.epoch >= before
            if answer.granted:
                assert owners.setdefault((index, epoch), claim.holder) == claim.holder
            answers.append(answer if arrived else None)
        clock.now_s = sent_s + max(delays)
        claim.settle(sent_s, epoch, answers, clock.now_s)
        if claim.held_until_s is None:
            for book in books:  # what a failed candidate won, it releases
                book.release(p.LeaseRequest(holder=claim.holder, epoch=epoch))
        holders = [c for c in claims if c.is_held(clock.now_s)]
        assert len(holders) <= 1
        for c in holders:  # its belief ends before the grants of a majority do
            until_s = cast(float, c.held_until_s)
            grants = [b.grant for b in books if b.grant is not None]
            assert sum(g.holder == c.holder and g.expires_s > until_s for g in grants) >= 2


# --- two keepers over three instances' books, through the HTTP client they use -----------


def _keepers(clock: Clock) -> tuple[LeaseKeeper, LeaseKeeper, HttpInstanceClient]:
    specs = tuple(
        InstanceSpec(name=f"pdd-{i}", role=InstanceRole.PD_DECODE, cluster="pd", http_port=port)
        for i, port in enumerate((8201, 8202, 8203))
    )
    deployment = Deployment(instances=specs)
    books = {spec.http_port: LeaseBook(clock) for spec in specs}

    def handle(request: httpx.Request) -> httpx.Response:
        book = books[request.url.port or 80]
        body = p.LeaseRequest.model_validate_json(request.content)
        is_release = request.url.path == "/lease/release"
        answer = book.release(body) if is_release else book.request(body)
        return httpx.Response(200, content=answer.model_dump_json())

    client = HttpInstanceClient(transport=httpx.MockTransport(handle))
    a = LeaseKeeper(deployment, CollectorRegistry(), "router-a", clock)
    b = LeaseKeeper(deployment, CollectorRegistry(), "router-b", clock)
    return a, b, client


def test_keepers_share_one_lease_and_the_holders_threshold() -> None:
    clock = Clock()

    async def run() -> None:
        a, b, client = _keepers(clock)
        async with client:
            assert await a.round(client, 500) is LeaseChange.ACQUIRED
            assert await b.round(client, 128) is LeaseChange.NOT_HELD
            assert a.fence() == 1 and b.published_threshold == 500 and b.seen_holder == "router-a"
            with pytest.raises(ConflictError, match="does not hold the slow-loop lease"):
                b.fence()
            clock.now_s += 2.0
            assert await a.round(client, 300) is LeaseChange.RENEWED
            assert await b.round(client, 128) is LeaseChange.NOT_HELD
            assert b.published_threshold == 300
            clock.now_s += 6.5  # a stopped renewing (it died): its grants expire
            assert not a.is_held
            assert await b.round(client, 300) is LeaseChange.ACQUIRED
            assert b.fence() == 2 and b.admin_view()["holder"] == "router-b"
            assert await a.round(client, 500) is LeaseChange.NOT_HELD

    asyncio.run(run())


def test_a_replica_that_follows_routes_with_the_holders_t() -> None:
    profile = LiveProfile(PrefillTiming.linear(1.0, 4096))
    config = SchedulerConfig(None, profile, can_move_cache=False)
    scheduler = GlobalScheduler(PrfaasPolicy(config), config, 96)
    scheduler.follow(None)
    assert scheduler.threshold_tokens == 96
    scheduler.follow(300)
    assert scheduler.threshold_tokens == 300


def test_a_drain_is_fenced_reported_and_ends_at_the_switch_or_its_timeout() -> None:
    book = LeaseBook(Clock())
    _ask(book, "a", 2)
    with pytest.raises(StaleEpochError):
        book.drain(p.DrainRequest(epoch=1, timeout_s=30.0))
    book.drain(p.DrainRequest(epoch=2, timeout_s=30.0))
    assert book.is_draining(book.clock())
    book.switched(2, "pd-decode", "pd-prefill")
    assert not book.is_draining(book.clock())
    book.drain(p.DrainRequest(epoch=2, timeout_s=30.0))
    book.clock.now_s += 30.0  # the holder died mid-drain: it ends by itself
    assert not book.is_draining(book.clock())
