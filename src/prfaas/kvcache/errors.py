"""Exceptions of the kvcache package.

Running out of pages is not an error: `HybridPrefixCache.allocate` returns `OutOfPages` so the
caller can queue or back off. Exceptions mean a caller broke the protocol (a bug) or two parties
disagree on how blocks are identified (a deployment error;
Dynamo users reported such mismatches failing silently, Dynamo PRs #1233 and #2981):

    KVCacheError
    ├── CacheMisuseError            the caller broke the pool's protocol (a bug)
    │   ├── UnknownBlockError       a block id the pool never issued
    │   │   └── DoubleFreeError     a block id already freed or evicted
    │   ├── RefcountUnderflowError  a release of a block nobody holds
    │   ├── BlockStateError         caching a private/transfer block, or one cached already
    │   ├── InvalidRequestError     block hashes that do not fit the token count
    │   ├── UnknownRequestError / DuplicateRequestError
    │   ├── UnknownTransferError    acking a transfer that is not pinned
    │   ├── UnknownInstanceError    an index query or event for an unregistered instance
    │   └── StorageUnavailableError data access on a bookkeeping-only pool
    ├── CacheConfigError            a layout, config or storage that cannot work (ValueError)
    ├── IncompatibleCacheError      an instance hashing blocks differently from the index
    └── EventStreamError            an event stream that contradicts what the index holds
"""

from __future__ import annotations


class KVCacheError(Exception):
    """Base of every exception raised by prfaas.kvcache."""


class CacheMisuseError(KVCacheError):
    """The caller broke the pool's protocol; retrying the same call cannot succeed."""


class UnknownBlockError(CacheMisuseError):
    pass


class DoubleFreeError(UnknownBlockError):
    pass


class RefcountUnderflowError(CacheMisuseError):
    pass


class BlockStateError(CacheMisuseError):
    pass


class InvalidRequestError(CacheMisuseError, ValueError):
    pass


class UnknownRequestError(CacheMisuseError):
    pass


class DuplicateRequestError(CacheMisuseError):
    pass


class UnknownTransferError(CacheMisuseError):
    pass


class UnknownInstanceError(CacheMisuseError):
    pass


class StorageUnavailableError(CacheMisuseError):
    pass


class CacheConfigError(KVCacheError, ValueError):
    pass


class IncompatibleCacheError(KVCacheError):
    pass


class EventStreamError(KVCacheError):
    pass
