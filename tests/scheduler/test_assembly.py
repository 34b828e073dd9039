"""One scheduler assembly (issue 25, point 5): `assemble` builds policy, admission control and
the slow loop from one `SchedulerSetup`; t has one owner, the scheduler."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scheduler_fixtures import make_config, make_view, req

from prfaas.planner import load_scenario
from prfaas.planner.scenario import AdmissionFile, RebalanceFile
from prfaas.scheduler import (
    POLICIES,
    REQUIRED_ROLES,
    AdmissionMode,
    GlobalScheduler,
    Reason,
    RebalanceAction,
    RebalanceConfig,
    RebalanceReason,
    RouteDecision,
    SchedulerSetup,
    ServePath,
    SetThreshold,
    StageStats,
    assemble,
    make_policy,
    missing_roles,
)
from prfaas.scheduler.view import Role

HARDWARE = load_scenario("paper-case-study").hardware


def setup(policy: str = "prfaas", **updates: object) -> SchedulerSetup:
    fields_ = {
        "policy": policy,
        "threshold_tokens": 10_000,
        "admission": AdmissionFile(mode="off"),
        "ttft_slo_s": 10.0,
        "rebalance": RebalanceFile(),
        **updates,
    }
    return SchedulerSetup(**fields_)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_is_assembled_by_name(policy: str) -> None:
    scheduler = assemble(setup(policy), make_config(), HARDWARE)
    assert scheduler.policy.name == policy
    assert scheduler.threshold_tokens == 10_000
    # The slow loop is PrfaaS's: a baseline keeps its fixed rule.
    assert (scheduler.rebalancer is not None) == (policy == "prfaas")


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown policy 'prefill-first' \(known: prfaas, "):
        setup("prefill-first")


def test_admission_and_slow_loop_come_from_the_setup() -> None:
    shed = AdmissionFile(mode="shed", margin_fraction=0.5)
    scheduler = assemble(
        setup(admission=shed, ttft_slo_s=4.0, rebalance=RebalanceFile(min_samples=7)),
        make_config(),
        HARDWARE,
    )
    assert scheduler.admission is not None
    admission = scheduler.admission.config
    assert (admission.mode, admission.ttft_slo_s, admission.margin_fraction) == (
        AdmissionMode.SHED,
        4.0,
        0.5,
    )
    assert scheduler.rebalancer is not None
    assert scheduler.rebalancer.config == RebalanceConfig.of(HARDWARE, RebalanceFile(min_samples=7))
    off = assemble(setup(rebalance=None), make_config(), HARDWARE)
    assert off.admission is None and off.rebalancer is None


def test_the_slow_loop_defaults_are_the_schemas_alone() -> None:
    """RebalanceConfig has no defaults of its own: every setting comes from the one schema."""
    loop = [f for f in fields(RebalanceConfig) if f.name != "hardware"]
    assert {f.name for f in loop} == set(RebalanceFile.model_fields)
    assert all(f.default is MISSING for f in loop)
    assert (RebalanceFile().period_s, RebalanceFile().min_samples) == (120.0, 200)


def test_required_roles_cover_every_policy() -> None:
    assert set(REQUIRED_ROLES) == set(POLICIES)
    assert missing_roles("prfaas", [Role.PD_PREFILL, Role.PD_DECODE]) == []  # a PD cluster alone
    assert missing_roles("homogeneous", [Role.PRFAAS, Role.PD_DECODE]) == [Role.PD_PREFILL]
    assert missing_roles("naive", [Role.PRFAAS]) == []
    assert missing_roles("fixed", [Role.PD_DECODE]) == [Role.PRFAAS, Role.PD_PREFILL]


def test_policies_hold_no_copy_of_t() -> None:
    for policy in POLICIES:
        chosen = assemble(setup(policy), make_config(), HARDWARE).policy
        assert not hasattr(chosen, "threshold_tokens"), policy


class _MovesT:
    """A slow loop that sets t to `threshold_tokens` at its first step."""

    def __init__(self, threshold_tokens: int) -> None:
        self.config = RebalanceConfig.of(HARDWARE, RebalanceFile(min_samples=1))
        self.threshold_tokens = threshold_tokens

    def step(self, *_: object) -> list[RebalanceAction]:
        return [SetThreshold(self.threshold_tokens, RebalanceReason.PLANNER_REOPTIMISED)]


@given(start=st.integers(0, 50_000), moved=st.integers(0, 50_000), length=st.integers(1, 60_000))
def test_the_slow_loops_t_is_the_one_every_later_decision_uses(
    start: int, moved: int, length: int
) -> None:
    """t has one owner: the slow loop's SetThreshold changes the scheduler's t, the host reads
    it there, and the policy decides with it (the fixed rule: whole length > t)."""
    config = make_config()
    loop: Any = _MovesT(moved)
    scheduler = GlobalScheduler(make_policy("fixed", config), config, start, loop)
    assert scheduler.threshold_tokens == start
    scheduler.route(req("first", 100), make_view())  # a window of one sample
    scheduler.rebalance(make_view(), StageStats(0.5, 0.5, 0.0, 0, 1e9))
    assert scheduler.threshold_tokens == moved
    decision = scheduler.route(req("r", length), make_view())
    assert isinstance(decision, RouteDecision)
    remote = length > moved
    assert decision.path is (ServePath.PRFAAS if remote else ServePath.PD_P)
    assert decision.reason is (Reason.FIXED_LONG if remote else Reason.FIXED_SHORT)
