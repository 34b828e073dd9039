"""What the global scheduler sees of the world: a read-only view, built by its host.

The scheduler never touches an instance, a socket or a clock. Its host (the simulator, later the
live router) builds a `ClusterView` before each decision: every instance with its role and
whether it accepts work, the inter-cluster link's signals, and the time as a number. A request
arrives as a `RouteRequest` carrying its restorable prefix on every prefill instance, as the
global KVCache index (`prfaas.kvcache.GlobalKVCacheIndex`) answers it.

Load is deliberately absent from `InstanceView`: instance-reported counters lag behind the router's
own dispatches (routers acting on stale counters: SGLang PR #27547), so the scheduler counts load
itself, at dispatch time (`scheduler.load.DispatchLedger`).

`LinkView` is the scheduler's own type for link telemetry; the live router maps
`prfaas.transfer.LinkSignals` onto it (the scheduler may not import `transfer`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId


class Role(StrEnum):
    """What an instance does (paper section 3)."""

    PRFAAS = "prfaas"  # prefill in the PrfaaS cluster; KV crosses the link
    PD_PREFILL = "pd-p"  # prefill in the local PD cluster; KV crosses RDMA
    PD_DECODE = "pd-d"  # decode in the local PD cluster


PREFILL_ROLES = (Role.PRFAAS, Role.PD_PREFILL)


@dataclass(frozen=True, slots=True)
class InstanceView:
    """One instance. `is_accepting` is False while it drains for a role flip.

    `kv_capacity_bytes` and `max_batch_size` matter for decode instances: the KV memory the
    decode batch may hold and BS_max. `has_receive_room` is False when a decode instance
    last reported its KV receive buffer full (a prefill shipping to it now would be
    refused): the decode choice passes it over while another has room.
    """

    instance_id: InstanceId
    cluster_id: ClusterId
    role: Role
    is_accepting: bool = True
    kv_capacity_bytes: float = 0.0
    max_batch_size: int = 0
    has_receive_room: bool = True


@dataclass(frozen=True, slots=True)
class LinkView:
    """Telemetry of the PrfaaS -> PD link (egress direction).

    `capacity_bytes_per_s` is the measured bandwidth; `bytes_waiting` what is queued to cross
    (the backlog); `retransmit_fraction` retransmitted over sent segments (0 when unknown).
    """

    capacity_bytes_per_s: float
    egress_bytes_per_s: float = 0.0
    bytes_waiting: float = 0.0
    rtt_s: float = 0.0
    retransmit_fraction: float = 0.0

    @property
    def utilisation(self) -> float:
        if self.capacity_bytes_per_s <= 0:
            return 1.0
        return self.egress_bytes_per_s / self.capacity_bytes_per_s

    @property
    def backlog_s(self) -> float:
        """Time to drain what waits at the measured bandwidth."""
        if self.capacity_bytes_per_s <= 0:
            return float("inf") if self.bytes_waiting > 0 else 0.0
        return self.bytes_waiting / self.capacity_bytes_per_s


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A request to place. `hit_tokens` maps prefill instances to their restorable prefix
    (absent = 0); `output_tokens` is the expected (or maximum) output length."""

    request_id: RequestId
    input_tokens: int
    output_tokens: int
    hit_tokens: Mapping[InstanceId, int] = field(default_factory=dict)

    def hit_on(self, instance_id: InstanceId) -> int:
        return min(self.hit_tokens.get(instance_id, 0), self.input_tokens)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The world at `now_s`."""

    now_s: float
    instances: tuple[InstanceView, ...]
    link: LinkView
    # A decision asks for the same role's instances several times; the view is frozen, so the
    # answer is computed once per role (not part of equality or the constructor).
    _accepting: dict[Role, tuple[InstanceView, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def with_accepting(
        cls,
        now_s: float,
        instances: tuple[InstanceView, ...],
        link: LinkView,
        accepting: Mapping[Role, tuple[InstanceView, ...]],
    ) -> ClusterView:
        """A view whose `accepting` answers its host already knows (the simulator keeps them
        between decisions, since roles change rarely); they must equal what `accepting` computes
        from `instances`."""
        view = cls(now_s, instances, link)
        view._accepting.update(accepting)
        return view

    def accepting(self, role: Role) -> tuple[InstanceView, ...]:
        found = self._accepting.get(role)
        if found is None:
            found = tuple(i for i in self.instances if i.role is role and i.is_accepting)
            self._accepting[role] = found
        return found

    def count(self, role: Role) -> int:
        """Instances holding `role`, draining ones included."""
        return sum(1 for i in self.instances if i.role is role)
