"""Helpers of the scheduler tests: linear fake profiles and a small two-cluster view."""

from __future__ import annotations

from dataclasses import dataclass

from prfaas.kvcache.ids import ClusterId, InstanceId, RequestId
from prfaas.scheduler import (
    ClusterView,
    InstanceView,
    LinkView,
    Role,
    RouteRequest,
    SchedulerConfig,
)

GB = 1e9


@dataclass(frozen=True)
class LinearProfile:
    """T_prefill = base + per_token * l; S_kv = 1 MB per 1K tokens; a decode step
    `decode_step` whatever the batch."""

    prefill_base_s: float
    prefill_per_token_s: float
    decode_step: float = 0.02
    prefill_concurrency: int = 1

    def prefill_s(self, length_tokens: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * length_tokens

    def cache_bytes(self, length_tokens: int) -> float:
        return 1000.0 * length_tokens

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return self.decode_step


FAST = LinearProfile(0.1, 1e-5)  # PrfaaS chip: 10K tokens in 0.2 s
SLOW = LinearProfile(0.2, 4e-5)  # PD chip: 10K tokens in 0.6 s


#: t the tests' schedulers start from (the scheduler owns t: `GlobalScheduler(..., t)`).
THRESHOLD_TOKENS = 10_000


def make_config(**kwargs: object) -> SchedulerConfig:
    return SchedulerConfig(
        prfaas_profile=FAST,  # type: ignore[arg-type]
        pd_profile=SLOW,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def inst(name: str, role: Role, accepting: bool = True) -> InstanceView:
    cluster = ClusterId("prfaas" if role is Role.PRFAAS else "pd")
    return InstanceView(InstanceId(name), cluster, role, accepting, 10 * GB, 8)


def make_view(
    link: LinkView | None = None,
    instances: tuple[InstanceView, ...] | None = None,
) -> ClusterView:
    default = (
        inst("f0", Role.PRFAAS),
        inst("f1", Role.PRFAAS),
        inst("p0", Role.PD_PREFILL),
        inst("p1", Role.PD_PREFILL),
        inst("d0", Role.PD_DECODE),
        inst("d1", Role.PD_DECODE),
    )
    return ClusterView(0.0, instances or default, link or LinkView(10 * GB))


def req(
    name: str, input_tokens: int, hits: dict[str, int] | None = None, output: int = 100
) -> RouteRequest:
    hit_map = {InstanceId(k): v for k, v in (hits or {}).items()}
    return RouteRequest(RequestId(name), input_tokens, output, hit_map)
