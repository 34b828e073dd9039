"""The instance's side of the slow-loop lease: grants with expiry, and fencing by epoch.

Router replicas (`serve.router.lease`) ask every instance for the lease; a replica holds it
while a majority of the instances it knows granted it. This module is one instance's book:

    POST /lease {holder, epoch, term_s}
        granted   no live grant, or a live one to the same holder, and `epoch` is above the
                  highest ever granted (a new holder, or the same one taking a new epoch) or
                  equal to it for that epoch's own holder (a renewal): the grant lives
                  `term_s` on this instance's monotonic clock from the moment it is answered
        refused   otherwise: another holder's grant is live, or `epoch` is stale (below the
                  highest, or equal to it for someone else)
    POST /lease/release {holder, epoch}   the holder gives its live grant up (a candidate
                  that failed to win a majority frees the instances it did win)
    POST /drain {epoch, timeout_s}        fenced: the instance says `draining` in /state
                  until its switch or `timeout_s` (the holder renews it while it drains, a
                  lease term at a time: a dead holder's drain ends by itself), so every
                  replica stops placing work on it, not only the holder
    POST /role {role, epoch}              fenced (`check_epoch`): refused (409 stale_epoch)
                  when `epoch` is below the highest this instance granted, or is missing
                  once any was granted; every switch is recorded with its epoch (`switched`)
                  and ends the drain

So one epoch goes to one holder on each instance, epochs only rise, and an action of a
holder that lost the lease (a paused process, a late message) is refused wherever a newer
holder was granted. A granted request also leaves the holder's t (`threshold_tokens`),
which the other replicas read back from their own rounds and route with. A refusal is a
normal answer (`granted: false`, with the holder and the highest epoch, so a candidate
knows what to ask next), never an error. What each
instance granted is in `/state` `lease`. The book is lost when the instance restarts (its
epoch starts at 0 again): the routers' epochs, taken above the highest any instance
reports, stay above it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from prfaas.serve import protocol as p
from prfaas.serve.errors import StaleEpochError

MAX_SWITCHES = 50


@dataclass(frozen=True, slots=True)
class Grant:
    holder: str
    epoch: int
    expires_s: float


@dataclass(slots=True)
class LeaseBook:
    """One instance's lease grants (module docstring); `clock` gives monotonic seconds."""

    clock: Callable[[], float] = time.monotonic
    epoch: int = 0  # the highest ever granted
    grant: Grant | None = None
    threshold_tokens: int | None = None  # t as the holder last sent it with a granted request
    drain_until_s: float | None = None  # draining for a flip until then (`drain`)
    switches: deque[p.RoleSwitchBody] = field(default_factory=lambda: deque(maxlen=MAX_SWITCHES))

    def live(self, now_s: float) -> Grant | None:
        """The grant that has not expired at `now_s`, if any."""
        grant = self.grant
        return grant if grant is not None and now_s < grant.expires_s else None

    def can_grant(self, holder: str, epoch: int, now_s: float) -> bool:
        live = self.live(now_s)
        if live is not None and live.holder != holder:
            return False
        if epoch > self.epoch:
            return True
        mine = self.grant is not None and self.grant.holder == holder
        return epoch == self.epoch and mine  # renewal, even just after expiry: nobody took it

    def request(self, body: p.LeaseRequest) -> p.LeaseAnswer:
        """Grant or refuse `body` (module docstring)."""
        now_s = self.clock()
        granted = self.can_grant(body.holder, body.epoch, now_s)
        if granted:
            self.epoch = body.epoch
            self.grant = Grant(body.holder, body.epoch, now_s + body.term_s)
            if body.threshold_tokens is not None:
                self.threshold_tokens = body.threshold_tokens
        return self.answer(now_s, granted=granted)

    def release(self, body: p.LeaseRequest) -> p.LeaseAnswer:
        """Drop the grant to `body.holder` at `body.epoch` (nothing else); the epoch stays."""
        if self.grant is not None and (self.grant.holder, self.grant.epoch) == (
            body.holder,
            body.epoch,
        ):
            self.grant = None
        return self.answer(self.clock())

    def check_epoch(self, epoch: int | None) -> None:
        """Refuse (409 stale_epoch) a slow-loop action under an epoch below the highest
        granted, or without one once any was granted."""
        if self.epoch == 0 or (epoch is not None and epoch >= self.epoch):
            return
        asked = "no epoch" if epoch is None else f"epoch {epoch}"
        raise StaleEpochError(
            f"{asked} is stale: this instance granted the slow-loop lease at epoch {self.epoch}"
        )

    def drain(self, body: p.DrainRequest) -> p.LeaseAnswer:
        """Drain for a flip for `body.timeout_s` from now (0: stop draining); fenced."""
        self.check_epoch(body.epoch)
        now_s = self.clock()
        self.drain_until_s = now_s + body.timeout_s if body.timeout_s > 0 else None
        return self.answer(now_s)

    def is_draining(self, now_s: float) -> bool:
        return self.drain_until_s is not None and now_s < self.drain_until_s

    def switched(self, epoch: int | None, from_role: str, to_role: str) -> None:
        """Record a role switch made under `epoch` (shown in `/state` `lease.switches`);
        the drain that led to it is over."""
        self.drain_until_s = None
        switch = p.RoleSwitchBody(
            epoch=epoch, from_role=from_role, to_role=to_role, t_s=self.clock()
        )
        self.switches.append(switch)

    def answer(self, now_s: float, *, granted: bool = False) -> p.LeaseAnswer:
        live = self.live(now_s)
        return p.LeaseAnswer(
            granted=granted,
            holder=live.holder if live is not None else None,
            epoch=self.epoch,
            remaining_s=live.expires_s - now_s if live is not None else 0.0,
            switches=list(self.switches),
            threshold_tokens=self.threshold_tokens,
        )
