"""The emulated backend's disk tier: the pool's lower tier as bookkeeping, loads as sleeps.

An emulated instance has no bytes to keep, so its disk tier is what the simulator's is: a
`TierSpec` under its `HybridPrefixCache` (demotion, promotion, events with the medium) and a
load time. Everything is counted in the modelled deployment's units, then scaled as the rest
of the emulation is (`EmulationSpec`):

    capacity     disk_tier.capacity_mib of the model's real cache bytes
    load         promoted pages x page bytes / read_mib_per_s     (modelled seconds)
    sleeps       load x time_factor, before the prefill's first layer
    published    read_mib_per_s x byte_factor / time_factor       (InstanceInfo, the router)

The published rate is in the units of the instance's timing table (cache bytes x
byte_factor per second x time_factor), so the router's price of a hit on this disk
(`scheduler.tiers.weighed_hits`) is the time the instance will sleep for it. The instance
side allocates with `scheduler.tiers.allocate_weighed`: a disk part not worth its load is
recomputed, as in the simulator, so router and instance agree.
"""

from __future__ import annotations

from prfaas.kvcache import Allocation, CacheRequest, HybridPrefixCache, Medium, OutOfPages, TierSpec
from prfaas.scheduler.tiers import allocate_weighed, promotion_s
from prfaas.serve.config.deployment import DiskTierSpec, EmulationSpec
from prfaas.specs.perf import PerfProfile

MIB = 2**20


class EmulatedDisk:
    """One emulated instance's disk tier (None spec: DRAM only, every method a no-op)."""

    def __init__(
        self, spec: DiskTierSpec | None, emulation: EmulationSpec, profile: PerfProfile
    ) -> None:
        self.tier = (
            None
            if spec is None
            else TierSpec(
                Medium.DISK,
                spec.capacity_mib * MIB,
                spec.read_mib_per_s * MIB,
                spec.write_mib_per_s * MIB,
            )
        )
        self.emulation = emulation
        self.profile = profile

    @property
    def published_read_bytes_per_s(self) -> float | None:
        """The read rate in the units of the instance's published timing (module docstring)."""
        if self.tier is None:
            return None
        e = self.emulation
        return self.tier.read_bytes_per_s * e.byte_factor / e.time_factor

    def allocate(
        self, pool: HybridPrefixCache, request: CacheRequest
    ) -> tuple[Allocation | OutOfPages, float]:
        """Allocate `request` (a disk part not worth its load left on disk) and the wall
        seconds its promotions take to read back."""
        allocation = allocate_weighed(pool, request, self.profile)
        if isinstance(allocation, OutOfPages):
            return allocation, 0.0
        load_s = promotion_s(pool, allocation.num_promoted_pages)
        return allocation, load_s * self.emulation.time_factor
