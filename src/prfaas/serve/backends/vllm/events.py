"""vLLM's KV cache events -> prfaas `BlockStored` / `BlockRemoved`, for the global index.

vLLM publishes every block its prefix cache stores or evicts (`--kv-events-config`, ZMQ PUB,
msgpack frames `[topic, seq (8 bytes), KVEventBatch]`; a batch is `[ts, events, rank]`,
each event a map tagged by `type`). Its block hashes and block size (128 or 256 tokens on
CPU) are its own, so they cannot be matched against the router's prompt hashes directly.
`EventTranslator` rebuilds prfaas's hash chain from the events themselves: a stored block
carries its parent's hash and its token ids, so each vLLM block becomes `vllm_block / B`
prfaas blocks of B tokens (`deployment.block_tokens` must divide vLLM's block size), chained
from the parent's last prfaas hash. Attention groups are stored block by block; a mamba
group's block (vLLM caches a state only at block boundaries) becomes a state snapshot at
that block's last boundary; in vLLM's "align" mode a mamba event names only the blocks whose
state it keeps, with the tokens since its parent, so the chain is walked through the others.

A stored block whose parent this translator has not seen yet waits (up to `MAX_WAITING`
events) until the parent arrives: vLLM stores a hybrid model's mamba group before its
attention group in the same step, so a state block often names a parent whose attention
block comes later in the same batch. A block whose parent never comes is never guessed.

Pure translation (no sockets): `EventSubscriber` below does the ZMQ part on a thread.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prfaas.kvcache import BlockRemoved, BlockStored, CacheEvent, HashScheme
from prfaas.kvcache.ids import BlockHash, InstanceId

ATTENTION_GROUP = 0
STATE_GROUP = 1
MAX_WAITING = 4096  # stored events held for a parent not seen yet (the oldest go first)


@dataclass(slots=True)
class _Block:
    """One vLLM block as prfaas sees it: its sub-block hashes (chain order)."""

    hashes: tuple[BlockHash, ...]
    groups: Counter[int] = field(default_factory=Counter)


class EventTranslator:
    """Folds vLLM event batches into prfaas cache events (one instance, one scheme)."""

    def __init__(self, instance_id: InstanceId, scheme: HashScheme, is_hybrid: bool) -> None:
        self._instance = instance_id
        self._scheme = scheme
        self._is_hybrid = is_hybrid
        self._blocks: dict[Any, _Block] = {}  # vLLM hash -> its prfaas sub-blocks
        self._held: Counter[tuple[int, BlockHash]] = Counter()
        self._kinds: dict[Any, str] = {}
        self._waiting: deque[dict[str, Any]] = deque()  # stored events, parent not seen yet
        self.num_dropped = 0  # stored events whose parent never came (the index lacks them)
        self.block_size: int | None = None  # vLLM's, from its events (None: none seen yet)

    def _group(self, event: dict[str, Any]) -> int:
        """prfaas group of an event: vLLM's group index, its kind learnt from stored events."""
        vllm_group = event.get("group_idx")
        kind = event.get("kv_cache_spec_kind")
        if isinstance(kind, str):
            self._kinds[vllm_group] = kind
        kind = self._kinds.get(vllm_group, "")
        if self._is_hybrid and "mamba" in kind.lower():
            return STATE_GROUP
        return ATTENTION_GROUP

    def _hold(self, group: int, block_hash: BlockHash, out: list[CacheEvent]) -> None:
        key = (group, block_hash)
        self._held[key] += 1
        if self._held[key] == 1:
            out.append(BlockStored(self._instance, group, block_hash))

    def _release(self, group: int, block_hash: BlockHash, out: list[CacheEvent]) -> None:
        key = (group, block_hash)
        if self._held[key] == 0:
            return
        self._held[key] -= 1
        if self._held[key] == 0:
            del self._held[key]
            out.append(BlockRemoved(self._instance, group, block_hash))

    def translate(self, batch: Sequence[Any]) -> list[CacheEvent]:
        """One decoded `KVEventBatch` ([ts, events, dp_rank]; each event a map tagged by
        `type`) as prfaas events, in order."""
        out: list[CacheEvent] = []
        for event in batch[1]:
            tag = event.get("type")
            if tag == "BlockStored":
                self._stored(event, out)
            elif tag == "BlockRemoved":
                group = self._group(event)
                for vllm_hash in event["block_hashes"]:
                    self._removed(_key(vllm_hash), group, out)
            elif tag == "AllBlocksCleared":
                for group, block_hash in list(self._held):
                    self._held[(group, block_hash)] = 1
                    self._release(group, block_hash, out)
                self._blocks.clear()
                self._waiting.clear()
        self._retry_waiting(out)
        return out

    @property
    def num_waiting(self) -> int:
        """Stored events held back until their parent block is seen."""
        return len(self._waiting)

    def _retry_waiting(self, out: list[CacheEvent]) -> None:
        """Store every waiting event whose parent is now known, until none is."""
        progress = True
        while progress and self._waiting:
            progress = False
            for _ in range(len(self._waiting)):
                event = self._waiting.popleft()
                if self._parent_known(event):
                    self._stored(event, out)
                    progress = True
                else:
                    self._waiting.append(event)

    def _parent_known(self, event: dict[str, Any]) -> bool:
        parent = event.get("parent_block_hash")
        return parent is None or _key(parent) in self._blocks

    def _stored(self, event: dict[str, Any], out: list[CacheEvent]) -> None:
        hashes, parent = event["block_hashes"], event.get("parent_block_hash")
        token_ids, block_size = event["token_ids"], event["block_size"]
        group = self._group(event)
        b = self._scheme.block_tokens
        if block_size % b:
            raise ValueError(f"vLLM block size {block_size} is not a multiple of {b}")
        self.block_size = block_size
        if parent is None:
            chain = self._scheme.root()
        elif (known := self._blocks.get(_key(parent))) is not None:
            chain = known.hashes[-1]
        else:
            self._waiting.append(event)
            if len(self._waiting) > MAX_WAITING:
                self._waiting.popleft()  # stored before we subscribed, or lost: not guessed
                self.num_dropped += 1
            return
        # The hashes name the event's last blocks: an attention event names every block its
        # tokens span; a mamba event in vLLM's "align" mode keeps states only at some
        # boundaries, so it names the state blocks and spans the tokens since its parent
        first_named = len(token_ids) // block_size - len(hashes)
        if first_named < 0:
            raise ValueError("a vLLM stored event names more blocks than its tokens span")
        for i in range(first_named):  # blocks without a state here: only the chain moves on
            for start in range(i * block_size, (i + 1) * block_size, b):
                chain = self._scheme.next_token_block(chain, token_ids[start : start + b])
        for i, vllm_hash in enumerate(hashes, start=first_named):
            tokens = token_ids[i * block_size : (i + 1) * block_size]
            key = _key(vllm_hash)
            block = self._blocks.get(key)
            if block is None:
                subs: list[BlockHash] = []
                for start in range(0, block_size, b):
                    chain = self._scheme.next_token_block(chain, tokens[start : start + b])
                    subs.append(chain)
                block = _Block(tuple(subs))
                self._blocks[key] = block
            chain = block.hashes[-1]
            block.groups[group] += 1
            targets = block.hashes if group == ATTENTION_GROUP else block.hashes[-1:]
            for block_hash in targets:
                self._hold(group, block_hash, out)

    def _removed(self, key: Any, group: int, out: list[CacheEvent]) -> None:
        block = self._blocks.get(key)
        if block is None or block.groups[group] == 0:
            return
        block.groups[group] -= 1
        targets = block.hashes if group == ATTENTION_GROUP else block.hashes[-1:]
        for block_hash in targets:
            self._release(group, block_hash, out)
        if not +block.groups:
            del self._blocks[key]

    def held_prefix_tokens(self, token_ids: Sequence[int]) -> int:
        """Tokens of the longest prefix whose attention blocks are all held here (and, for a
        hybrid model, with a state snapshot at its end): what this instance's vLLM would hit."""
        hashes = self._scheme.hash_tokens(list(token_ids))
        best = 0
        for position, block_hash in enumerate(hashes):
            if self._held[(ATTENTION_GROUP, block_hash)] == 0:
                break
            if not self._is_hybrid or self._held[(STATE_GROUP, block_hash)]:
                best = position + 1
        return best * self._scheme.block_tokens


def _key(vllm_hash: Any) -> Any:
    return bytes(vllm_hash) if isinstance(vllm_hash, (bytes, bytearray)) else vllm_hash


class EventSubscriber:
    """A ZMQ SUB socket, bound to the instance's events port, on a daemon thread feeding
    `on_batch` with decoded batches."""

    def __init__(self, endpoint: str, on_batch: Any) -> None:
        self._endpoint = endpoint
        self._on_batch = on_batch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-kv-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        import msgpack  # type: ignore[import-untyped]
        import zmq

        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        socket.setsockopt(zmq.SUBSCRIBE, b"")
        # vLLM's publisher binds only wildcard or ipc endpoints and connects to any other
        # (`ZmqEventPublisher._is_bind_endpoint`), so on a host:port endpoint we listen
        socket.bind(self._endpoint)
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                if not poller.poll(200):
                    continue
                frames = socket.recv_multipart()
                self._on_batch(msgpack.unpackb(frames[-1], raw=False, strict_map_key=False))
        finally:
            socket.close(linger=0)
