"""The connector's transfer side: prfaas's Sender and Receiver on an event loop thread.

vLLM calls the connector from its model-runner thread, synchronously, between and inside
forward passes; prfaas's transfer layer is asyncio. `TransferIO` owns one event loop on a
daemon thread with one `Sender` (every role may prefill) and one `Receiver` writing into an
`ArraySink` (every role may decode: a PD instance can be flipped), built from the
deployment's `ShippingPlan` exactly as the instance shell builds its own
(`transfer.shipping`: TLS, payload checks and, for a PrfaaS prefill, the link's token bucket
and RTT or its kernel-shaped namespaces). A PD instance has a second sender paced by the
link for cache moves (`is_move`), which cross the clusters.

Prefill side (`send_slice`, `finish`, `abort`): each request's operations run in order on
one task per transfer, so the model-runner thread only queues and returns (layer-wise
pipelining: a layer's blocks are on the wire while the next layer computes). Payloads are
referenced, not copied: the connector keeps the source blocks pinned (delayed free) until
the transfer is `done`.

Decode side: the receiver commits a transfer into the sink; `claim` hands its slices over
(one copy out of the sink) and releases the pages. Transfers that nobody claims within
`staged_ttl_s` are dropped (a decode request that never came), so nothing stays pinned.

Every `status_interval_s` the thread writes a JSON status file (link telemetry, staged and
active transfers, per-transfer timing) that the instance shell reads for `/state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from prfaas.transfer import (
    PeerAddress,
    PeerIdentity,
    RequestId,
    Sender,
    SliceKey,
    SliceMeta,
    TransferAborted,
    TransferReceived,
)
from prfaas.transfer.shipping import KvEndpoints, ShippingPlan

T = TypeVar("T")


@dataclass(slots=True)
class TransferTiming:
    """One outgoing transfer, in seconds since the I/O thread started (benchmark input)."""

    transfer_id: str
    first_slice_s: float
    last_slice_s: float = 0.0
    finish_called_s: float = 0.0  # the prefill's last step ended: everything is queued
    completed_s: float = 0.0  # the receiver committed every byte
    payload_bytes: int = 0
    num_slices: int = 0
    error: str | None = None


@dataclass(slots=True)
class _Outgoing:
    ops: asyncio.Queue[tuple[str, Any]]
    timing: TransferTiming
    done: bool = False
    ok: bool = False


@dataclass(slots=True)
class _Arrival:
    at_s: float
    ok: bool
    message: str = ""
    payload_bytes: int = 0


@dataclass(slots=True)
class IoSettings:
    plan: ShippingPlan  # the deployment's one KV shipping path (`transfer.shipping`)
    secret: bytes
    status_path: str | None = None
    staged_ttl_s: float = 120.0
    status_interval_s: float = 0.5
    cache_layout: list[dict[str, Any]] = field(default_factory=list)  # reported as it is


class TransferIO:
    def __init__(self, settings: IoSettings, identity: PeerIdentity) -> None:
        self._settings = settings
        self._identity = identity
        self._t0 = time.monotonic()
        self._loop = asyncio.new_event_loop()
        self._outgoing: dict[str, _Outgoing] = {}
        self._drivers: set[asyncio.Task[None]] = set()
        self._arrivals: dict[str, _Arrival] = {}
        self._timings: list[TransferTiming] = []
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="prfaas-transfer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            raise self._startup_error

    # --- thread and loop -------------------------------------------------------------------

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _run(self) -> None:
        _unpin_this_thread()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as err:
            self._startup_error = err
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        s = self._settings
        self.endpoints = KvEndpoints.build(s.plan, s.secret, self._identity)
        await self.endpoints.listen(s.plan)
        self._tasks = [
            asyncio.create_task(self._pump_arrivals()),
            asyncio.create_task(self._write_status()),
        ]

    def call(self, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(work(), self._loop).result()

    def submit(self, work: Callable[[], Any]) -> None:
        """Run a plain callable on the loop, without waiting."""
        self._loop.call_soon_threadsafe(work)

    def close(self) -> None:
        async def shut() -> None:
            for task in self._tasks:
                task.cancel()
            await self.endpoints.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)

    # --- prefill side ----------------------------------------------------------------------

    def send_slice(
        self,
        transfer_id: str,
        peer: PeerAddress,
        key: SliceKey,
        *,
        dtype: str,
        shape: tuple[int, ...],
        payload: Any,
        is_move: bool = False,
    ) -> None:
        """Queue one slice of `transfer_id` to `peer` (the transfer starts on its first);
        `is_move`: a cache move, sent by the link-paced sender."""
        op = ("slice", (key, dtype, shape, payload))
        self.submit(lambda: self._enqueue(transfer_id, peer, op, is_move))

    def finish(self, transfer_id: str, peer: PeerAddress, is_move: bool = False) -> None:
        self.submit(lambda: self._enqueue(transfer_id, peer, ("finish", None), is_move))

    def abort(self, transfer_id: str) -> None:
        def go() -> None:
            out = self._outgoing.get(transfer_id)
            if out is not None and not out.done:
                out.ops.put_nowait(("abort", None))

        self.submit(go)

    def is_done(self, transfer_id: str) -> bool:
        """Whether the transfer ended (completed, failed or aborted): its blocks may go.
        Asked on the loop, behind every operation already submitted: a transfer whose first
        slice is still queued is not mistaken for one that ended."""

        async def look() -> bool:
            out = self._outgoing.get(transfer_id)
            return out is None or out.done

        return self.call(look)

    def forget(self, transfer_id: str) -> None:
        self.submit(lambda: self._outgoing.pop(transfer_id, None))

    def _enqueue(
        self, transfer_id: str, peer: PeerAddress, op: tuple[str, Any], is_move: bool
    ) -> None:
        out = self._outgoing.get(transfer_id)
        if out is None:
            out = _Outgoing(asyncio.Queue(), TransferTiming(transfer_id, self._now()))
            self._outgoing[transfer_id] = out
            self._timings.append(out.timing)
            del self._timings[:-256]
            kv = self.endpoints
            sender = kv.move_sender if is_move else kv.sender
            task = asyncio.create_task(self._drive(sender, transfer_id, peer, out))
            self._drivers.add(task)
            task.add_done_callback(self._drivers.discard)
        out.ops.put_nowait(op)

    async def _drive(
        self, sender: Sender, transfer_id: str, peer: PeerAddress, out: _Outgoing
    ) -> None:
        timing = out.timing
        transfer = None
        try:
            transfer = await sender.start_transfer(peer, RequestId(transfer_id))
            while True:
                kind, arg = await out.ops.get()
                if kind == "abort":
                    await transfer.abort("the prefill request ended before its KV was sent")
                    timing.error = "aborted"
                    return
                if kind == "finish":
                    timing.finish_called_s = self._now()
                    await transfer.finish()
                    timing.completed_s = self._now()
                    out.ok = True
                    return
                key, dtype, shape, payload = arg
                await transfer.send_slice(key, dtype, shape, payload)
                timing.last_slice_s = self._now()
                timing.payload_bytes += memoryview(payload).nbytes
                timing.num_slices += 1
        except Exception as err:
            timing.error = f"{type(err).__name__}: {err}"
            if transfer is not None:
                with contextlib.suppress(Exception):
                    await transfer.abort("prefill side failed")
        finally:
            out.done = True

    # --- decode side -----------------------------------------------------------------------

    async def _pump_arrivals(self) -> None:
        while True:
            await self.endpoints.receiver.wait_for_events()
            for event in self.endpoints.receiver.take_events():
                if isinstance(event, TransferReceived):
                    self._arrivals[event.request_id] = _Arrival(
                        self._now(), True, payload_bytes=event.payload_bytes
                    )
                elif isinstance(event, TransferAborted):
                    self._arrivals[event.request_id] = _Arrival(self._now(), False, event.message)
            self._drop_stale()

    def _drop_stale(self) -> None:
        horizon = self._now() - self._settings.staged_ttl_s
        for transfer_id, arrival in list(self._arrivals.items()):
            if arrival.at_s < horizon:
                del self._arrivals[transfer_id]
                if arrival.ok:
                    self.endpoints.sink.release(RequestId(transfer_id))

    def poll_arrival(self, transfer_id: str) -> tuple[bool, str] | None:
        """None while `transfer_id` is not in; (True, "") committed; (False, why) aborted."""

        async def look() -> tuple[bool, str] | None:
            arrival = self._arrivals.get(transfer_id)
            return None if arrival is None else (arrival.ok, arrival.message)

        return self.call(look)

    def claim(self, transfer_id: str) -> dict[SliceKey, tuple[SliceMeta, bytes]]:
        """A committed transfer's slices; its sink pages are released (a second claim: {})."""

        async def take() -> dict[SliceKey, tuple[SliceMeta, bytes]]:
            arrival = self._arrivals.pop(transfer_id, None)
            if arrival is None or not arrival.ok:
                return {}
            slices = self.endpoints.sink.committed(RequestId(transfer_id))
            self.endpoints.sink.release(RequestId(transfer_id))
            return slices

        return self.call(take)

    def discard(self, transfer_id: str) -> None:
        """The decode side will not load `transfer_id` (it already holds the prompt)."""
        self.claim(transfer_id)

    # --- status ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "at_s": self._now(),
            "links": [asdict(link) for link in self.endpoints.sender.link_signals()],
            "active_receives": self.endpoints.receiver.num_active_requests,
            "staged_transfers": sum(1 for a in self._arrivals.values() if a.ok),
            "sink_free_pages": self.endpoints.sink.num_free_pages,
            "sink_total_pages": self.endpoints.sink.num_pages,
            "sending": sum(1 for o in self._outgoing.values() if not o.done),
            "transfers": [asdict(t) for t in self._timings],
            "cache_layout": self._settings.cache_layout,
        }

    async def _write_status(self) -> None:
        path = self._settings.status_path
        if path is None:
            return
        target = Path(path)
        scratch = target.with_suffix(".tmp")
        while True:
            self._drop_stale()
            scratch.write_text(json.dumps(self.status()))
            scratch.replace(target)
            await asyncio.sleep(self._settings.status_interval_s)


def _unpin_this_thread() -> None:
    """Let this thread, and the socket threads it starts, run on any CPU. vLLM's CPU worker
    pins its process to its compute cores, where its scheduler loop spins between steps;
    I/O threads that inherit that pin were measured waiting 5-7 s for a turn (two engines
    pinned to core 0 of 2), stalling transfers that the other core could have run at once.
    The compute threads keep their pin (Linux: affinity is per thread)."""
    with contextlib.suppress(OSError):  # a cpuset that forbids the widening: keep the pin
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
