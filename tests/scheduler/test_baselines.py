"""The baseline policies' routing rules, exact decisions and reasons."""

from __future__ import annotations

import pytest
from scheduler_fixtures import THRESHOLD_TOKENS, make_config, make_view, req

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import (
    POLICIES,
    GlobalScheduler,
    Reason,
    RouteDecision,
    ServePath,
    make_policy,
)


def route(name: str, request, s: GlobalScheduler | None = None) -> RouteDecision:  # type: ignore[no-untyped-def]
    config = make_config()
    s = s or GlobalScheduler(make_policy(name, config), config, THRESHOLD_TOKENS)
    d = s.route(request, make_view())
    assert isinstance(d, RouteDecision)
    return d


def test_homogeneous_always_pd_p_with_affinity() -> None:
    d = route("homogeneous", req("r", 100_000, {"p1": 50_000, "f0": 90_000}))
    assert (d.path, d.reason, d.prefill_instance_id, d.reused_prefix_tokens) == (
        ServePath.PD_P,
        Reason.HOMOGENEOUS,
        "p1",
        50_000,
    )


def test_naive_always_prfaas() -> None:
    d = route("naive", req("r", 100))
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.NAIVE_ALL_REMOTE)


@pytest.mark.parametrize(
    ("tokens", "path", "reason"),
    [
        (10_000, ServePath.PD_P, Reason.FIXED_SHORT),
        (10_001, ServePath.PRFAAS, Reason.FIXED_LONG),
    ],
)
def test_fixed_threshold_on_whole_length(tokens: int, path: ServePath, reason: Reason) -> None:
    d = route("fixed", req("r", tokens))
    assert (d.path, d.reason) == (path, reason)


def test_fixed_threshold_is_cache_blind() -> None:
    # 30K with 25K cached in PD: the PrfaaS policy would keep it local; fixed offloads it,
    # and picks the least-loaded instance, not the one with the hit.
    d = route("fixed", req("r", 30_000, {"p0": 25_000, "f1": 25_000}))
    assert (d.path, d.reason, d.prefill_instance_id) == (ServePath.PRFAAS, Reason.FIXED_LONG, "f0")
    assert d.reused_prefix_tokens == 0


def test_dynamo_remote_when_long_on_decode_side_and_not_busy() -> None:
    d = route("dynamo", req("r", 30_000, {"p0": 5_000}))
    assert (d.path, d.reason) == (ServePath.PRFAAS, Reason.DYNAMO_REMOTE)


def test_dynamo_local_when_short_after_local_prefix() -> None:
    d = route("dynamo", req("r", 30_000, {"p0": 25_000}))
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.DYNAMO_SHORT_LOCAL)


def test_dynamo_local_when_remote_queue_busy() -> None:
    config = make_config(dynamo_busy_s=5.0)
    s = GlobalScheduler(make_policy("dynamo", config), config, THRESHOLD_TOKENS)
    for name in ("f0", "f1"):
        s.ledger.dispatch(RequestId(f"q{name}"), InstanceId(name), 5.0, InstanceId("d0"), 0.0)
    d = route("dynamo", req("r", 30_000), s)
    assert (d.path, d.reason) == (ServePath.PD_P, Reason.DYNAMO_BUSY_LOCAL)


def test_unknown_policy_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown policy 'x'"):
        make_policy("x", make_config())
    assert set(POLICIES) == {"prfaas", "homogeneous", "naive", "fixed", "dynamo"}
