"""The receiving instance's ledger of arrived KV: every committed transfer is claimed,
dropped or expired, so no request's pages stay in the receive buffer once it is over.

The receiver (`prfaas.transfer.Receiver`) commits a request's slices into the instance's
`ArraySink`; before this ledger, only a `/decode` (or `/prefix/import`) call released them,
so a request whose client left during its prefill stranded its KV there for good (issue 26:
80 such clients filled the buffer and every long prompt then failed `out_of_space`).
Each request id here is in one state:

    AWAITED   a claim waits for it          --commit-->  ARRIVED (the waiter wakes)
    ARRIVED   pages held in the sink (and   --claim-->   slices copied out, pages released
              the prompt ids, when sent)
                                            --drop-->    pages released now
                                            --ttl_s-->   pages released (the safety net)
    DROPPED   cancelled before it arrived   --commit-->  pages released at once
    FAILED    the receiver aborted it       --claim-->   the claim fails with the reason
              (an abort after the commit releases the pages it held)

`drop` is the router's `POST /cancel` (the request ended without its decode: the client
left, the attempt failed) and also what a claim that gives up (cancelled, timed out) leaves
behind, so KV that lands after its decode call went away is released the moment it lands.
Entries other than AWAITED live at most `ttl_s` (`expire`), so the ledger
stays bounded however the router behaves. Callers: `serve.instance.runtime` (the receiver's event
pump, `/decode`, `/prefix/import`, `/cancel`, its housekeeping task, `/state`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from prfaas.kvcache import KvSlice
from prfaas.serve.errors import InstanceFailedError
from prfaas.serve.kv_shipping import committed_slices
from prfaas.transfer import ArraySink, RequestId

UNCLAIMED_KV_TTL_S = 60.0  # as long as a decode call waits for its KV (ARRIVAL_TIMEOUT_S)


@dataclass(frozen=True, slots=True)
class ArrivedKv:
    """What a claim gets: the request's slices and the prompt ids that came with them (None
    when the sender sent none: a prefix move, or a sender that does not `send_prompt`)."""

    slices: list[KvSlice]
    prompt_token_ids: tuple[int, ...] | None = None


class ClaimState(Enum):
    AWAITED = "awaited"
    ARRIVED = "arrived"
    DROPPED = "dropped"
    FAILED = "failed"


@dataclass(slots=True)
class _Entry:
    state: ClaimState
    since_s: float
    waiter: asyncio.Future[None] | None = None
    error: str = ""
    prompt_token_ids: tuple[int, ...] | None = None


class KvClaims:
    """Arrived KV by request id (see the module docstring); `clock` gives seconds."""

    def __init__(
        self,
        sink: ArraySink,
        ttl_s: float = UNCLAIMED_KV_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sink = sink
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: dict[str, _Entry] = {}

    @property
    def num_unclaimed(self) -> int:
        """Requests whose KV arrived and is still held, waiting for its claim."""
        return sum(1 for e in self._entries.values() if e.state is ClaimState.ARRIVED)

    def arrived(self, request_id: str, prompt_token_ids: tuple[int, ...] | None = None) -> None:
        """The receiver committed `request_id` (with its prompt ids, when they came): hand it
        to its claim, or hold it (ttl_s), or release it at once when the request was dropped."""
        entry = self._entries.get(request_id)
        if entry is not None and entry.state is ClaimState.DROPPED:
            self._sink.release(RequestId(request_id))
            del self._entries[request_id]
            return
        waiter = entry.waiter if entry is not None else None
        self._entries[request_id] = _Entry(
            ClaimState.ARRIVED, self._clock(), waiter, prompt_token_ids=prompt_token_ids
        )
        _wake(waiter)

    def aborted(self, request_id: str, message: str) -> None:
        """The receiver aborted `request_id` (it freed what it had not committed): a claim
        fails. A sender's abort may come after the commit: then the pages are released."""
        entry = self._entries.get(request_id)
        if entry is not None and entry.state is ClaimState.DROPPED:
            return
        if entry is not None and entry.state is ClaimState.ARRIVED:
            self._sink.release(RequestId(request_id))
        waiter = entry.waiter if entry is not None else None
        self._entries[request_id] = _Entry(ClaimState.FAILED, self._clock(), waiter, message)
        _wake(waiter)

    async def claim(self, request_id: str, timeout_s: float) -> ArrivedKv:
        """The request's slices and prompt once they are all here (their pages are then
        released); 502 when its transfer failed or nothing arrived within `timeout_s`."""
        entry = self._entries.setdefault(request_id, _Entry(ClaimState.AWAITED, self._clock()))
        if entry.state is ClaimState.AWAITED:
            if entry.waiter is not None:
                raise InstanceFailedError(f"the KV of {request_id} is claimed already")
            entry.waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(entry.waiter), timeout_s)
            except TimeoutError:
                self.drop(request_id)
                raise InstanceFailedError(f"no KV arrived for {request_id}") from None
            except asyncio.CancelledError:
                self.drop(request_id)
                raise
            entry = self._entries[request_id]
        if entry.state is ClaimState.DROPPED:
            raise InstanceFailedError(f"request {request_id} was cancelled")
        del self._entries[request_id]
        if entry.state is ClaimState.FAILED:
            raise InstanceFailedError(f"KV transfer aborted: {entry.error}")
        slices = committed_slices(self._sink, request_id)
        self._sink.release(RequestId(request_id))
        return ArrivedKv(slices, entry.prompt_token_ids)

    def drop(self, request_id: str) -> None:
        """The request is over without its claim: release what arrived, and whatever arrives
        later the moment it does; a claim waiting now fails."""
        entry = self._entries.get(request_id)
        if entry is not None and entry.state is ClaimState.ARRIVED:
            self._sink.release(RequestId(request_id))
        waiter = entry.waiter if entry is not None else None
        self._entries[request_id] = _Entry(ClaimState.DROPPED, self._clock())
        _wake(waiter)

    def expire(self) -> int:
        """Release KV unclaimed for `ttl_s` and forget old drops and failures (AWAITED
        entries belong to a waiting claim, which bounds itself); the requests released."""
        horizon_s = self._clock() - self._ttl_s
        stale = [
            rid
            for rid, e in self._entries.items()
            if e.state is not ClaimState.AWAITED and e.since_s <= horizon_s
        ]
        released = 0
        for rid in stale:
            if self._entries.pop(rid).state is ClaimState.ARRIVED:
                self._sink.release(RequestId(rid))
                released += 1
        return released


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
