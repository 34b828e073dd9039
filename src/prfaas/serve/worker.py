"""`EngineWorker`: the one thread that owns an instance's `Engine` (torch is synchronous).

The asyncio side sends commands (closures run on the engine thread, in order); results come
back through `loop.call_soon_threadsafe`, so the event loop never blocks on a forward pass:

    asyncio handlers ──commands──► engine thread: run commands, engine.step(), drain pool events
                     ◄──items────  ExportRecord ... ExportDone   (prefill, layer by layer)
                     ◄──items────  TokenEvent ... Completion     (decode, token by token)

Lifecycle: `start()` after the event loop runs, `stop()` at shutdown (joins the thread).
Cache events from the pool get a sequence number here; the router pulls them (`events_since`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from prfaas.engine import (
    Completion,
    Engine,
    ExportedPrefill,
    ExportRecord,
    SamplingParams,
    TokenEvent,
)
from prfaas.kvcache import CacheEvent

MAX_EVENT_LOG = 200_000
IDLE_WAIT_S = 0.05


@dataclass(frozen=True, slots=True)
class ExportDone:
    """The prefill finished; `exported` is None when the pool had no room."""

    exported: ExportedPrefill | None
    hit_tokens: int


@dataclass(frozen=True, slots=True)
class SeqEvent:
    seq: int
    event: CacheEvent


Item = ExportRecord | ExportDone | TokenEvent | Completion | BaseException
Sink = Callable[[Item], None]


class EngineWorker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._commands: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._decoding: dict[str, Sink] = {}
        self._lock = threading.Lock()
        self._events: deque[SeqEvent] = deque(maxlen=MAX_EVENT_LOG)
        self._next_seq = 0
        self.num_waiting = 0
        self.num_running = 0
        self.free_pages = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=10)

    # --- commands (called from the event loop) ---------------------------------------------

    def export(
        self,
        loop: asyncio.AbstractEventLoop,
        request_id: str,
        tokens: list[int],
        params: SamplingParams,
    ) -> asyncio.Queue[Item]:
        """Prefill on the engine thread; records arrive as layers finish, then `ExportDone`."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        sink = _threadsafe(loop, out)

        def command() -> None:
            try:
                probe = self.engine.paged.request("probe", tokens, 0, imported=False)
                hit = self.engine.paged.pool.match(probe).hit_tokens
                exported = self.engine.export_prefill(
                    request_id, tokens, params, from_token=0, on_layer=sink
                )
                sink(ExportDone(exported, hit))
            except Exception as err:
                sink(err)

        self._commands.put(command)
        return out

    def decode(
        self, loop: asyncio.AbstractEventLoop, exported: ExportedPrefill, params: SamplingParams
    ) -> asyncio.Queue[Item]:
        """Join an imported request to the batch; tokens arrive, then its `Completion`."""
        out: asyncio.Queue[Item] = asyncio.Queue()
        sink = _threadsafe(loop, out)

        def command() -> None:
            try:
                self.engine.submit_import(exported, params, sink)
                self._decoding[exported.request_id] = sink
            except Exception as err:
                sink(err)

        self._commands.put(command)
        return out

    def cancel(self, request_id: str) -> None:
        def command() -> None:
            if self._decoding.pop(request_id, None) is not None:
                self.engine.cancel(request_id)

        self._commands.put(command)

    def events_since(self, seq: int) -> tuple[list[SeqEvent], int]:
        with self._lock:
            return [e for e in self._events if e.seq >= seq], self._next_seq

    # --- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            busy = self.engine.has_work
            try:
                command = self._commands.get(block=not busy)
            except queue.Empty:
                command = _NOTHING
            if command is None:
                return
            while command is not _NOTHING:
                if command is None:
                    return
                command()
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    command = _NOTHING
            if self.engine.has_work:
                self._step()
            self._publish()

    def _step(self) -> None:
        try:
            finished = self.engine.step()
        except Exception as err:  # a failed step fails every request in the batch
            for sink in self._decoding.values():
                sink(err)
            for request_id in list(self._decoding):
                self.engine.cancel(request_id)
            self._decoding.clear()
            return
        for completion in finished:
            done = self._decoding.pop(completion.request_id, None)
            if done is not None:
                done(completion)
        if not self.engine.num_running and self.engine.num_waiting:
            threading.Event().wait(IDLE_WAIT_S)  # waiting for pages that nobody frees yet

    def _publish(self) -> None:
        events = self.engine.paged.pool.take_events()
        with self._lock:
            for event in events:
                self._events.append(SeqEvent(self._next_seq, event))
                self._next_seq += 1
        self.num_waiting = self.engine.num_waiting
        self.num_running = self.engine.num_running
        self.free_pages = self.engine.paged.pool.pool.num_free_pages


def _nothing() -> None:
    return None


_NOTHING: Callable[[], None] = _nothing


def _threadsafe(loop: asyncio.AbstractEventLoop, out: asyncio.Queue[Item]) -> Sink:
    def sink(item: Item) -> None:
        loop.call_soon_threadsafe(out.put_nowait, item)

    return sink
