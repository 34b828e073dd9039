"""The simulated deployment: instances with roles, the view the scheduler reads, stage stats.

A `SimInstance` is one instance of either cluster. PD instances carry a prefill and a decode
facet and use the one their role names; a role flip first drains (the instance stops accepting,
finishes what it holds in its old role) and then switches (`settle_flip`). Each instance is
timed by its role's shape: PrfaaS, PD-P, and PD-D (the PD-P shape unless the plan gave PD-D
its own, `Hardware.pd_decode`; such instances never flip, `sim.config`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prfaas.kvcache.cache import CacheConfig, HybridPrefixCache
from prfaas.kvcache.ids import ClusterId, InstanceId
from prfaas.scheduler import ClusterView, InstanceView, Role, StageStats
from prfaas.sim.config import RunConfig
from prfaas.sim.instances import DecodeFacet, PrefillFacet

if TYPE_CHECKING:
    from prfaas.sim.runner import Simulator

#: Instance views and, per role, the accepting ones: what `cluster_view` reuses between decisions.
ViewsCache = tuple[tuple[InstanceView, ...], dict[Role, tuple[InstanceView, ...]]]

PRFAAS_CLUSTER = ClusterId("prfaas")
PD_CLUSTER = ClusterId("pd")


@dataclass(slots=True)
class SimInstance:
    instance_id: InstanceId
    cluster_id: ClusterId
    role: Role
    prefill: PrefillFacet
    decode: DecodeFacet
    target_role: Role | None = None
    view_kv_bytes: float = 0.0
    last_busy_s: float = 0.0
    last_area: float = 0.0
    flips: list[tuple[float, Role]] = field(default_factory=list)
    _view: InstanceView | None = None  # rebuilt only when the role or draining changes
    on_change: Callable[[], None] | None = None  # told when the role or draining changes

    @property
    def is_accepting(self) -> bool:
        return self.target_role is None

    def begin_flip(self, to_role: Role) -> None:
        self.target_role = to_role
        self._changed()
        self.settle_flip()

    def settle_flip(self) -> None:
        """Switch once the old role's work is done."""
        if self.target_role is None:
            return
        old = self.decode if self.role is Role.PD_DECODE else self.prefill
        if old.is_idle:
            self.role, self.target_role = self.target_role, None
            self._changed()
            self.flips.append((self.prefill.loop.now_s, self.role))

    def _changed(self) -> None:
        self._view = None
        if self.on_change is not None:
            self.on_change()

    def view(self) -> InstanceView:
        if self._view is None:
            self._view = InstanceView(
                self.instance_id,
                self.cluster_id,
                self.role,
                self.is_accepting,
                self.decode.kv_capacity_bytes,
                self.decode.max_batch_size,
            )
        return self._view


def build_instances(
    sim: Simulator, config: RunConfig, cache: CacheConfig | None
) -> list[SimInstance]:
    body, d = config.simulation, config.deployment
    kv_bytes = config.decode_kv_capacity_bytes
    roles = [(PRFAAS_CLUSTER, Role.PRFAAS, f"prfaas-{i}") for i in range(d.n_prfaas)]
    roles += [(PD_CLUSTER, Role.PD_PREFILL, f"pd-{i}") for i in range(d.n_p)]
    roles += [(PD_CLUSTER, Role.PD_DECODE, f"pd-{d.n_p + i}") for i in range(d.n_d)]
    out = []
    profiles = {
        Role.PRFAAS: sim.prfaas_profile,
        Role.PD_PREFILL: sim.pd_profile,
        Role.PD_DECODE: sim.decode_profile,
    }
    for cluster_id, role, name in roles:
        profile = profiles[role]
        instance_id = InstanceId(name)
        pool = HybridPrefixCache(cache, instance_id) if cache is not None else None
        prefill = PrefillFacet(
            sim.loop,
            sim,
            profile,
            pool=pool,
            hash_scheme=cache.hash_scheme if cache is not None else None,
            chunk_tokens=body.prefill_chunk_tokens,
            max_batch_requests=body.prefill_max_batch_requests,
        )
        decode = DecodeFacet(sim.loop, sim, profile, config.decode_max_batch, kv_bytes)
        out.append(SimInstance(instance_id, cluster_id, role, prefill, decode))
    return out


def cluster_view(sim: Simulator) -> ClusterView:
    """The scheduler's view now; instance views and per-role lists are kept until a role or
    draining flag changes (`SimInstance.on_change` clears them)."""
    cached = sim.views_cache
    if cached is None:
        views = tuple(i.view() for i in sim.instances)
        accepting = {
            role: tuple(v for v in views if v.role is role and v.is_accepting) for role in Role
        }
        cached = sim.views_cache = (views, accepting)
    return ClusterView.with_accepting(sim.loop.now_s, cached[0], sim.link_view(), cached[1])


def stage_stats(sim: Simulator, period_s: float) -> StageStats:
    """Utilisation of PD-P (busy time) and PD-D (batch occupancy) over the last period."""
    p_busy = p_count = d_area = d_count = 0.0
    waiting = 0
    for inst in sim.instances:
        busy, area = inst.prefill.busy_s, inst.decode.batch_area
        if inst.role is Role.PD_PREFILL:
            p_busy += busy - inst.last_busy_s
            p_count += 1
        elif inst.role is Role.PD_DECODE:
            d_area += (area - inst.last_area) / max(1, inst.decode.max_batch_size)
            d_count += 1
            waiting += len(inst.decode.waiting)
        inst.last_busy_s, inst.last_area = busy, area
    ledger = sim.scheduler.ledger
    queues = [
        ledger.prefill_work_s(i.instance_id) for i in sim.instances if i.role is Role.PD_PREFILL
    ]
    return StageStats(
        pd_prefill_utilisation=min(1.0, p_busy / max(period_s * p_count, 1e-9)),
        pd_decode_utilisation=min(1.0, d_area / max(period_s * d_count, 1e-9)),
        pd_prefill_queue_s=sum(queues) / max(1, len(queues)),
        decode_waiting_requests=waiting,
        link_capacity_bytes_per_s=sim.link.capacity_bytes_per_s,
    )
