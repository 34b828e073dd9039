"""The hybrid prefix cache pool and the global KVCache index (paper section 3).

Pure logic shared by the simulator, the engine and the router: no sockets, threads, torch or
clocks; it imports only `prfaas.specs` (and NumPy for the test-grade page storage).

One instance owns one `HybridPrefixCache`: one pool of equal pages that a model's attention
groups (block-level KV, partial prefix match) and state groups (linear-attention / SSM states
and SWA windows, snapshots valid only at an exact boundary) all allocate from. A hit is the
longest prefix that *every* group can restore, so a hybrid model never gets attention KV
without the matching state. A request's lifecycle:

    m = cache.match(request)                      # side-effect free; the router may use it
    a = cache.allocate(request, m)                # Allocation, or OutOfPages (nothing changed)
    ... engine restores a.state[i].restore_from, computes, fills blocks and snapshots ...
    cache.commit(request.request_id)              # full blocks + snapshots become prefix cache
    t = cache.begin_transfer(request.request_id, first_block=receiver_hit_blocks)  # optional
    cache.release(request.request_id)             # request's refs; cached blocks join the LRU
    cache.complete_transfer(t.transfer_id)        # the receiver acked: tail + state freed
    index.apply(cache.take_events())              # BlockStored / BlockRemoved

With a lower tier (`CacheConfig.lower_tier`, module `tiers`) eviction demotes to disk and a
hit promotes back; events carry the medium and the index knows each unit's tier.

Running out of pages is a normal return value (`OutOfPages`); misuse raises a `KVCacheError`
(the tree is drawn in `kvcache.errors`).

Design notes, the page alignment rule and measured costs: docs/kvcache.md.
"""

from __future__ import annotations

from prfaas.kvcache.block_pool import BlockPool, NewBlock
from prfaas.kvcache.cache import CacheConfig, HybridPrefixCache, TierCounters
from prfaas.kvcache.errors import (
    BlockStateError,
    CacheConfigError,
    CacheMisuseError,
    DoubleFreeError,
    DuplicateRequestError,
    EventStreamError,
    IncompatibleCacheError,
    InvalidRequestError,
    KVCacheError,
    RefcountUnderflowError,
    StorageUnavailableError,
    UnknownBlockError,
    UnknownInstanceError,
    UnknownRequestError,
    UnknownTransferError,
)
from prfaas.kvcache.events import BlockRemoved, BlockStored, CacheEvent
from prfaas.kvcache.hashing import (
    MOONCAKE_BLOCK_TOKENS,
    CacheIdentity,
    HashScheme,
    model_fingerprint,
)
from prfaas.kvcache.ids import (
    BlockHash,
    BlockId,
    ClusterId,
    InstanceId,
    PageId,
    RequestId,
    TransferId,
)
from prfaas.kvcache.index import ClusterMatch, GlobalKVCacheIndex, IndexMatch
from prfaas.kvcache.layout import GroupKind, GroupSpec, PageLayout
from prfaas.kvcache.policy import SnapshotPolicy
from prfaas.kvcache.replay import ReplayStats, replay_sequential
from prfaas.kvcache.slices import KvSlice
from prfaas.kvcache.storage import NumpyPageStorage, PageStorage
from prfaas.kvcache.tiers import (
    LowerTier,
    Medium,
    MemoryTierStorage,
    TierMove,
    TierSpec,
    TierStorage,
)
from prfaas.kvcache.values import (
    Allocation,
    AllocationPlan,
    AttentionBlocks,
    BlockInfo,
    BlockKind,
    CacheRequest,
    OutOfPages,
    PoolStats,
    PrefixMatch,
    Promotion,
    StateBlocks,
    TransferManifest,
)

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "Allocation",
    "AllocationPlan",
    "AttentionBlocks",
    "BlockHash",
    "BlockId",
    "BlockInfo",
    "BlockKind",
    "BlockPool",
    "BlockRemoved",
    "BlockStateError",
    "BlockStored",
    "CacheConfig",
    "CacheConfigError",
    "CacheEvent",
    "CacheIdentity",
    "CacheMisuseError",
    "CacheRequest",
    "ClusterId",
    "ClusterMatch",
    "DoubleFreeError",
    "DuplicateRequestError",
    "EventStreamError",
    "GlobalKVCacheIndex",
    "GroupKind",
    "GroupSpec",
    "HashScheme",
    "HybridPrefixCache",
    "IncompatibleCacheError",
    "IndexMatch",
    "InstanceId",
    "InvalidRequestError",
    "KVCacheError",
    "KvSlice",
    "LowerTier",
    "Medium",
    "MemoryTierStorage",
    "NewBlock",
    "NumpyPageStorage",
    "OutOfPages",
    "PageId",
    "PageLayout",
    "PageStorage",
    "PoolStats",
    "PrefixMatch",
    "Promotion",
    "RefcountUnderflowError",
    "ReplayStats",
    "RequestId",
    "SnapshotPolicy",
    "StateBlocks",
    "StorageUnavailableError",
    "TierCounters",
    "TierMove",
    "TierSpec",
    "TierStorage",
    "TransferId",
    "TransferManifest",
    "UnknownBlockError",
    "UnknownInstanceError",
    "UnknownRequestError",
    "UnknownTransferError",
    "model_fingerprint",
    "replay_sequential",
]
