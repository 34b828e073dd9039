"""The torch engine's disk tier: demoted pool units as files in a local directory (issue 28).

The pool's bookkeeping (`prfaas.kvcache.tiers.LowerTier`) decides which units live on disk
and within what capacity; this class holds their bytes, one file per unit:

    <directory>/g<group>-<hash as 16 hex digits>.unit      (exactly the unit's bytes)

`HybridPrefixCache` writes a unit here when the pool evicts it (`put`) and deletes it when the
disk tier evicts it or DRAM computes it afresh; when a hit reaches it, the engine's reader
(`engine.layer_load`) reads it back into fresh pages layer by layer from `path_of(key)`, then
deletes it. Writes go to a temporary name and are renamed into
place, so a crash never leaves a torn unit under a real name.

Cold restart: the bookkeeping lives in the process, so a restarted instance cannot vouch for
files a previous process left (they might be half written, or from another model). The
directory is therefore cleared at start-up (`*.unit` and `*.tmp` files only, nothing else
in it is touched): a restarted instance starts with an empty disk tier, and its first
events tell the router so. This is the documented guarantee (docs/kvcache.md, "Tiers").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from prfaas.kvcache import CacheConfigError, CacheMisuseError, Medium, TierSpec
from prfaas.kvcache.tiers import UnitKey

#: Defaults of a local NVMe SSD, what the scheduler charges a load (override per instance).
DEFAULT_READ_BYTES_PER_S = 2.0 * 2**30
DEFAULT_WRITE_BYTES_PER_S = 1.0 * 2**30


@dataclass(frozen=True, slots=True)
class DiskTierConfig:
    """Where an instance keeps demoted pages and how much of that disk it may use."""

    directory: Path
    capacity_bytes: int
    read_bytes_per_s: float = DEFAULT_READ_BYTES_PER_S
    write_bytes_per_s: float = DEFAULT_WRITE_BYTES_PER_S

    def tier_spec(self) -> TierSpec:
        return TierSpec(
            Medium.DISK, self.capacity_bytes, self.read_bytes_per_s, self.write_bytes_per_s
        )


class FileTierStorage:
    """A `TierStorage` of one file per unit under `directory` (cleared at start-up)."""

    def __init__(self, directory: Path) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for stale in [*directory.glob("*.unit"), *directory.glob("*.tmp")]:
                stale.unlink()
        except OSError as err:
            raise CacheConfigError(f"disk tier directory {directory}: {err.strerror}") from None
        self.directory = directory

    def path_of(self, key: UnitKey) -> Path:
        group, block_hash = key
        return self.directory / f"g{group}-{block_hash:016x}.unit"

    def put(self, key: UnitKey, data: bytes) -> None:
        path = self.path_of(key)
        temporary = path.with_suffix(".tmp")
        try:
            with temporary.open("wb") as handle:
                handle.write(data)
            os.replace(temporary, path)
        except OSError:
            temporary.unlink(missing_ok=True)  # a full disk keeps no partial file
            raise

    def get(self, key: UnitKey) -> bytes:
        try:
            return self.path_of(key).read_bytes()
        except FileNotFoundError:
            raise CacheMisuseError(f"unit {key} is not on disk") from None

    def delete(self, key: UnitKey) -> None:
        self.path_of(key).unlink(missing_ok=True)

    def num_units(self) -> int:
        return sum(1 for _ in self.directory.glob("*.unit"))
