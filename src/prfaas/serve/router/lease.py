"""The slow-loop lease among router replicas: exactly one runs role flips and the threshold.

Several routers serve one deployment behind any HTTP load balancer; each routes every request
itself, but only the replica holding this lease runs the slow loop (`serve.router.rebalance`),
so two flips never run at once. No new service: the instances are the voters
(`serve.instance.lease`).

    every RENEW_S (2 s)   send POST /lease {holder: replica_id, epoch, term_s: TERM_S} to every
                          instance of the deployment at once (sent at s, router clock)
    majority granted      held until s + TERM_S - MARGIN_S (router clock): an instance's grant
                          runs TERM_S from when it *answered*, later than s, so this replica
                          stops believing before any grant of its majority expires
    no majority           not held (a holder that loses its majority stops at once); the
                          grants it did win are released, so the next round starts clean

The epoch: a holder renews at its own; a candidate asks one above the highest any instance
reported, so the epoch rises with every new holder and each instance grants one epoch to one
holder. Every slow-loop action on an instance carries the epoch (`fence`), and an instance
refuses one below the highest it granted: a holder that lost the lease without knowing (a
paused process, a message that arrived late) cannot flip an instance that a newer holder's
majority covers. A candidate waits a random part of a round before asking, so three replicas
that start together rarely split the vote.

The threshold: the holder's t travels with its lease requests and each instance keeps the one
its grant came with; every other replica routes with the t of the newest epoch its own round
read back (`GlobalScheduler.follow`, which also drops the slow-loop window it will not use),
so all replicas route with one t, within two rounds of a change.

When the holder dies its grants expire after TERM_S; another replica asks within RENEW_S
after, so the lease moves within about TERM_S + 2 x RENEW_S (10 s). With the slow loop off
(`rebalance.enabled: false`) there is no lease and no slow loop; flips by hand
(`/admin/instances/{name}/role`) then go unfenced, as with one router.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment
from prfaas.serve.errors import ConflictError
from prfaas.serve.router.instance_client import InstanceCallError, InstanceClient

if TYPE_CHECKING:
    from prfaas.serve.router.flow import RouterRuntime

TERM_S = 6.0
RENEW_S = 2.0
MARGIN_S = 1.0
ASK_TIMEOUT_S = 1.0
MAX_HISTORY = 50
log = logging.getLogger("prfaas.lease")


class LeaseChange(Enum):
    """What one round did to this replica's lease."""

    ACQUIRED = "acquired"
    RENEWED = "renewed"
    LOST = "lost"
    NOT_HELD = "not-held"


@dataclass(slots=True)
class LeaseClaim:
    """One replica's belief about the lease (pure: time is passed in; module docstring)."""

    holder: str
    num_voters: int
    term_s: float = TERM_S
    margin_s: float = MARGIN_S
    epoch: int = 0  # held, or last asked for
    highest_seen: int = 0  # the highest epoch any instance reported
    held_until_s: float | None = None

    @property
    def majority(self) -> int:
        return self.num_voters // 2 + 1

    def is_held(self, now_s: float) -> bool:
        return self.held_until_s is not None and now_s < self.held_until_s

    def next_epoch(self, now_s: float) -> int:
        """The epoch to ask for: ours while held, else one above any seen."""
        if self.is_held(now_s):
            return self.epoch
        return max(self.highest_seen, self.epoch) + 1

    def settle(
        self, sent_s: float, epoch: int, answers: Sequence[p.LeaseAnswer | None], now_s: float
    ) -> LeaseChange:
        """The round sent at `sent_s` for `epoch` got `answers` (None: no answer)."""
        was_held = self.is_held(now_s)
        self.highest_seen = max([self.highest_seen, *(a.epoch for a in answers if a)])
        granted = sum(1 for a in answers if a is not None and a.granted)
        if granted >= self.majority:
            self.epoch, self.held_until_s = epoch, sent_s + self.term_s - self.margin_s
            if not self.is_held(now_s):  # the round took longer than the term
                self.held_until_s = None
                return LeaseChange.LOST if was_held else LeaseChange.NOT_HELD
            return LeaseChange.RENEWED if was_held else LeaseChange.ACQUIRED
        self.held_until_s = None
        return LeaseChange.LOST if was_held else LeaseChange.NOT_HELD


def replica_id() -> str:
    """This router process's name among replicas: host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class LeaseKeeper:
    """Asks the instances for the lease every round and says whether this replica holds it."""

    deployment: Deployment
    metrics: CollectorRegistry
    holder: str  # this replica (`Registry.replica_id`)
    clock: Callable[[], float] = time.monotonic
    claim: LeaseClaim = field(init=False)
    seen_holder: str | None = None  # the holder most instances named in the last round
    published_threshold: int | None = None  # t of the newest epoch any instance reported
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    _changes: PromCounter = field(init=False)

    def __post_init__(self) -> None:
        self.claim = LeaseClaim(self.holder, len(self.deployment.instances))
        r = self.metrics
        held = Gauge("prfaas:slow_loop_lease_held", "1 while this replica holds it.", registry=r)
        held.set_function(lambda: float(self.is_held))
        epoch = Gauge("prfaas:slow_loop_lease_epoch", "Epoch held or last asked.", registry=r)
        epoch.set_function(lambda: float(self.claim.epoch))
        self._changes = PromCounter(
            "prfaas:slow_loop_lease_changes", "Lease acquired / lost.", ["change"], registry=r
        )

    @property
    def is_enabled(self) -> bool:
        """A lease exists while the slow loop is on."""
        return self.deployment.rebalance.enabled

    @property
    def is_held(self) -> bool:
        return self.is_enabled and self.claim.is_held(self.clock())

    def fence(self) -> int | None:
        """The epoch a slow-loop action carries (None when there is no lease); 409 when this
        replica does not hold the lease."""
        if not self.is_enabled:
            return None
        if not self.is_held:
            raise ConflictError(
                f"this router replica ({self.holder}) does not hold the slow-loop lease "
                f"(holder: {self.seen_holder or 'none'}); ask the holder"
            )
        return self.claim.epoch

    async def run(self, rt: RouterRuntime) -> None:
        """A round every RENEW_S (a candidate waits a random part of one first); a replica
        that does not hold the lease then routes with the holder's t (`follow`)."""
        if not self.is_enabled:
            return
        while True:
            try:
                await self.round(rt.client, rt.threshold_tokens)
                if not self.is_held:
                    rt.follow(self.published_threshold)
            except Exception:  # one bad round is logged; the next one decides again
                log.exception("lease round failed")
            await asyncio.sleep(self.pause_s())

    def pause_s(self) -> float:
        """Until the next round: RENEW_S for the holder; a random part of it for a candidate,
        shorter while no instance names a live holder (start-up, a holder's grants expired)."""
        if self.is_held:
            return RENEW_S
        if self.seen_holder is None:
            return RENEW_S * random.uniform(0.1, 0.4)
        return RENEW_S * random.uniform(0.5, 1.5)

    async def round(
        self, client: InstanceClient, threshold_tokens: int | None = None
    ) -> LeaseChange:
        """Ask every instance once (with our t, which a grant publishes); settle; release
        what a lost candidacy won."""
        sent_s = self.clock()
        epoch = self.claim.next_epoch(sent_s)
        body = p.LeaseRequest(
            holder=self.holder,
            epoch=epoch,
            term_s=self.claim.term_s,
            threshold_tokens=threshold_tokens,
        )
        urls = [spec.url for spec in self.deployment.instances]
        answers = await asyncio.gather(*(_ask(client.lease, url, body) for url in urls))
        change = self.claim.settle(sent_s, epoch, answers, self.clock())
        holders = Counter(a.holder for a in answers if a is not None and a.holder)
        self.seen_holder = holders.most_common(1)[0][0] if holders else None
        published = [(a.epoch, a.threshold_tokens) for a in answers if a and a.threshold_tokens]
        self.published_threshold = max(published)[1] if published else None
        if change is LeaseChange.NOT_HELD:
            won = [url for url, a in zip(urls, answers, strict=True) if a and a.granted]
            await asyncio.gather(*(_ask(client.lease_release, url, body) for url in won))
        if change in (LeaseChange.ACQUIRED, LeaseChange.LOST):
            self._changes.labels(change.value).inc()
            self.history.append({"t_s": round(sent_s, 3), "change": change.value, "epoch": epoch})
            log.warning(
                "prfaas: slow-loop lease %s at epoch %d by %s", change.value, epoch, self.holder
            )
        return change

    def admin_view(self) -> dict[str, Any]:
        """The lease as `/admin/state` shows it."""
        now_s = self.clock()
        until = self.claim.held_until_s
        return {
            "enabled": self.is_enabled,
            "replica": self.holder,
            "held": self.is_held,
            "epoch": self.claim.epoch,
            "highest_epoch_seen": self.claim.highest_seen,
            "held_for_s": round(until - now_s, 3) if self.is_held and until else 0.0,
            "holder": self.holder if self.is_held else self.seen_holder,
            "voters": self.claim.num_voters,
            "majority": self.claim.majority,
            "term_s": self.claim.term_s,
            "renew_s": RENEW_S,
            "published_threshold_tokens": self.published_threshold,
            "history": list(self.history),
        }


class LeaseCall(Protocol):
    """`InstanceClient.lease` or `.lease_release`."""

    async def __call__(
        self, url: str, body: p.LeaseRequest, *, timeout_s: float
    ) -> p.LeaseAnswer: ...


async def _ask(call: LeaseCall, url: str, body: p.LeaseRequest) -> p.LeaseAnswer | None:
    """One instance's answer; None when it gives none in time (it counts as no grant)."""
    try:
        return await call(url, body, timeout_s=ASK_TIMEOUT_S)
    except (InstanceCallError, ValueError):
        return None
