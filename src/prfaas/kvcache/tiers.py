"""Cache tiers below the block pool: where an evicted prefix block goes instead of dying.

    DRAM (the block pool's pages) --evict, demote--> DISK (a LowerTier) --evict--> dropped
             ^                                          |
             +---------- hit: promote (move back) ------+

A unit (attention block or state snapshot) lives in exactly one tier of an instance at a time:
demotion moves it down when the pool's LRU evicts it, promotion moves it back into fresh pool
pages when a request's hit reaches it, and a request that computes a unit again drops the
lower copy. The lower tier is an LRU of its own, measured in the pool's pages so that a
promoted unit takes exactly the pages it gave up (bytes promoted = bytes demoted): admitting a
unit drops its oldest entries until it fits, and a unit larger than the whole tier is dropped.

Snapshots travel with their attention blocks: the pool releases a prefix deepest first (the
snapshot at boundary b just before the block ending at b), so both reach the LRU, and the lower
tier, side by side, and leave it in that order too. The hit rule is unchanged: a boundary
counts only when every group can restore it from some tier, and `allocate` promotes the
lower-tier units of a hit before the engine reads them (or hands their loads to the engine,
which reads them layer by layer: `defer_promotions`), so a hit is whole in DRAM when used.

This module is pure bookkeeping (no files, no clock). The bytes move through the
`TierStorage` of the tier's owner, driven by the `TierMove` commands the pool records
(`HybridPrefixCache` applies them in order after each call; the simulator has no bytes and
only counts them). A tier's read and write bandwidth are configuration the scheduler and the
simulator use to price a load from it (docs/kvcache.md, "Tiers").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from prfaas.kvcache.errors import CacheConfigError, CacheMisuseError
from prfaas.kvcache.ids import BlockHash, PageId


class Medium(StrEnum):
    """Where a cached unit lives; carried by cache events and the global index."""

    DRAM = "dram"
    DISK = "disk"


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One tier below DRAM: its medium, its size and the bandwidth of moving units to and from
    it (what the scheduler and the simulator charge for a load)."""

    medium: Medium
    capacity_bytes: int
    read_bytes_per_s: float
    write_bytes_per_s: float

    def __post_init__(self) -> None:
        if self.medium is Medium.DRAM:
            raise CacheConfigError("DRAM is the block pool itself, not a lower tier")
        if self.capacity_bytes < 0:
            raise CacheConfigError(f"tier capacity must be >= 0, got {self.capacity_bytes}")
        if self.read_bytes_per_s <= 0 or self.write_bytes_per_s <= 0:
            raise CacheConfigError("tier bandwidths must be positive")

    def read_s(self, num_bytes: int) -> float:
        """Seconds to load `num_bytes` back from this tier."""
        return num_bytes / self.read_bytes_per_s


#: A unit's identity in a tier: (group index, chained hash), as in the pool's prefix cache.
UnitKey = tuple[int, BlockHash]


@dataclass(frozen=True, slots=True)
class Demoted:
    """Copy the unit's bytes from these (just evicted) pool pages into the lower tier."""

    key: UnitKey
    pages: tuple[PageId, ...]


@dataclass(frozen=True, slots=True)
class Promoted:
    """Copy the unit's bytes from the lower tier into these pool pages, then forget them there."""

    key: UnitKey
    pages: tuple[PageId, ...]


@dataclass(frozen=True, slots=True)
class Dropped:
    """Forget the unit's bytes in the lower tier (its LRU evicted it, or DRAM has it afresh)."""

    key: UnitKey


TierMove = Demoted | Promoted | Dropped


class TierStorage(Protocol):
    """Bytes of a lower tier, keyed by unit. Writes and reads are whole units."""

    def put(self, key: UnitKey, data: bytes) -> None: ...

    def get(self, key: UnitKey) -> bytes: ...

    def delete(self, key: UnitKey) -> None: ...


class MemoryTierStorage:
    """A dict of bytes: the lower tier's storage in tests."""

    def __init__(self) -> None:
        self._units: dict[UnitKey, bytes] = {}

    def put(self, key: UnitKey, data: bytes) -> None:
        self._units[key] = data

    def get(self, key: UnitKey) -> bytes:
        try:
            return self._units[key]
        except KeyError:
            raise CacheMisuseError(f"unit {key} is not in the tier's storage") from None

    def delete(self, key: UnitKey) -> None:
        self._units.pop(key, None)

    def __len__(self) -> int:
        return len(self._units)


class LowerTier:
    """The bookkeeping of one tier below DRAM: an LRU of units measured in pool pages."""

    def __init__(self, spec: TierSpec, page_bytes: int) -> None:
        self.spec = spec
        self.capacity_pages = spec.capacity_bytes // page_bytes
        self._units: OrderedDict[UnitKey, int] = OrderedDict()  # key -> pages, oldest first
        self._used_pages = 0

    @property
    def used_pages(self) -> int:
        return self._used_pages

    @property
    def num_units(self) -> int:
        return len(self._units)

    def holds(self, key: UnitKey) -> bool:
        return key in self._units

    def units(self) -> Iterator[tuple[UnitKey, int]]:
        """(key, pages) of every unit, next victim first; for audits and tests."""
        yield from self._units.items()

    def take(self, key: UnitKey) -> int:
        """Remove a unit (to promote or drop it); returns the pages it held."""
        num_pages = self._units.pop(key, None)
        if num_pages is None:
            raise CacheMisuseError(f"unit {key} is not in the {self.spec.medium} tier")
        self._used_pages -= num_pages
        return num_pages

    def admit(self, key: UnitKey, num_pages: int) -> list[UnitKey] | None:
        """Store a demoted unit at the LRU tail, dropping the oldest units until it fits.
        Returns the dropped keys, or None (nothing changed) when it is larger than the tier."""
        if num_pages > self.capacity_pages:
            return None
        if key in self._units:
            raise CacheMisuseError(f"unit {key} is demoted twice")
        dropped: list[UnitKey] = []
        while self._used_pages + num_pages > self.capacity_pages:
            victim, pages = self._units.popitem(last=False)
            self._used_pages -= pages
            dropped.append(victim)
        self._units[key] = num_pages
        self._used_pages += num_pages
        return dropped
