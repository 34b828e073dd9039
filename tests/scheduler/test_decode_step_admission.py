"""Admission's decode-step check: the chosen decode instance's predicted step (memory-bound KV
reads of its batch, the profile's `decode_step_s`) is held to the TPOT objective."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_fixtures import FAST, LinearProfile, make_view, req

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import (
    AdmissionConfig,
    AdmissionMode,
    AdmissionPolicy,
    DispatchLedger,
    GlobalScheduler,
    PrfaasPolicy,
    Rejection,
    RejectReason,
    RouteDecision,
    SchedulerConfig,
    lifetime_context_tokens,
    predict_decode_step_s,
)

TPOT_SLO_S = 0.025


@dataclass(frozen=True)
class MemoryBoundProfile(LinearProfile):
    """PD chip: the fixtures' SLOW prefill, and a decode step that reads the batch's KV once:
    5 ms + batch x S_kv(context) / 10 GB/s (S_kv = 1 KB a token)."""

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return 0.005 + batch_size * self.cache_bytes(context_tokens) / 10e9


PD = MemoryBoundProfile(0.2, 4e-5)


def scheduler(tpot_slo_s: float | None = TPOT_SLO_S) -> GlobalScheduler:
    config = SchedulerConfig(
        prfaas_profile=FAST,  # type: ignore[arg-type]
        pd_profile=PD,  # type: ignore[arg-type]
        threshold_tokens=10_000,
        burst_enter_s=math.inf,
    )
    admission = AdmissionPolicy(
        AdmissionConfig(AdmissionMode.SHED, ttft_slo_s=2.0, tpot_slo_s=tpot_slo_s)
    )
    return GlobalScheduler(PrfaasPolicy(config), config, admission=admission)


def decoding(s: GlobalScheduler, count: int, input_tokens: int, output_tokens: int = 100) -> None:
    """`count` requests past their prefill on each decode instance (d0, d1)."""
    context = lifetime_context_tokens(input_tokens, output_tokens)
    for k in range(2 * count):
        rid = RequestId(f"dec-{k}")
        s.ledger.dispatch(
            rid, InstanceId("p0"), 0.0, InstanceId(f"d{k % 2}"), 0, decode_context_tokens=context
        )
        s.ledger.prefill_done(rid)


def test_lifetime_context_is_prompt_plus_half_the_output() -> None:
    assert lifetime_context_tokens(10_000, 300) == 10_150
    assert lifetime_context_tokens(10_000, 0) == 10_000


def test_ledger_counts_contexts_from_prefill_done_to_decode_done() -> None:
    ledger = DispatchLedger()
    d0 = InstanceId("d0")
    ledger.dispatch(RequestId("a"), InstanceId("p0"), 1.0, d0, 0.0, decode_context_tokens=12_000)
    ledger.dispatch(RequestId("b"), InstanceId("p0"), 1.0, d0, 0.0, decode_context_tokens=3_000)
    assert ledger.decoding_context_tokens(d0) == 0  # both still prefilling
    ledger.prefill_done(RequestId("a"))
    assert ledger.decoding_context_tokens(d0) == 12_000
    ledger.decode_done(RequestId("b"))  # dropped before its prefill ended: never counted
    assert ledger.decoding_context_tokens(d0) == 12_000
    ledger.decode_done(RequestId("a"))
    assert ledger.decoding_context_tokens(d0) == 0
    assert ledger.decoding_requests(d0) == 0


def test_prediction_is_the_profile_step_at_the_batch_mean_lifetime_context() -> None:
    s = scheduler()
    decoding(s, 3, 50_000)
    request = req("r", 5_000)
    decision = s.route(request, make_view())
    assert isinstance(decision, RouteDecision)
    s.ledger.decode_done(decision.request_id)  # judge it against the batch without itself
    # Three members at 50,050 and the new one at 5,050: mean 38,800 over a batch of four.
    expected = PD.decode_step_s(4, 38_800)
    assert expected == pytest.approx(0.005 + 4 * 38_800e3 / 10e9)
    assert predict_decode_step_s(decision, request, s.ledger, s.config) == pytest.approx(expected)


def test_a_long_context_is_refused_where_a_short_one_fits() -> None:
    s = scheduler()
    decoding(s, 3, 50_000)  # three long members on each decode instance, BS_max 8
    # 5K: mean 38,800 -> 20.5 ms; 40K: 47,550 -> 24.0 ms; both within 25 ms.
    assert isinstance(s.route(req("short", 5_000), make_view()), RouteDecision)
    s.ledger.decode_done(RequestId("short"))
    assert isinstance(s.route(req("medium", 40_000), make_view()), RouteDecision)
    s.ledger.decode_done(RequestId("medium"))
    # 80K: mean 57,550 -> 28.0 ms > 25 ms, although the batch is half empty.
    long_one = s.route(req("long", 80_000), make_view())
    assert isinstance(long_one, Rejection)
    assert long_one.reason is RejectReason.DECODE_STEP_OVER_SLO
    assert long_one.retry_after_s == 1.0
    assert s.reasons["rejected:decode-step-over-slo"] == 1


def test_a_long_output_counts_half_its_length() -> None:
    s = scheduler()
    decoding(s, 3, 50_000)
    # 40K prompt with 40K of output: lifetime context 60K, mean 52,537 -> 26.0 ms.
    refused = s.route(req("r", 40_000, output=40_000), make_view())
    assert isinstance(refused, Rejection) and refused.reason is RejectReason.DECODE_STEP_OVER_SLO


def test_without_a_tpot_objective_the_check_is_off() -> None:
    s = scheduler(tpot_slo_s=None)
    decoding(s, 3, 50_000)
    assert isinstance(s.route(req("long", 80_000), make_view()), RouteDecision)


def test_a_full_batch_is_reported_as_full_before_its_step() -> None:
    s = scheduler()
    decoding(s, 8, 50_000)  # BS_max = 8 on both, and a slow step too
    refused = s.route(req("r", 5_000), make_view())
    assert isinstance(refused, Rejection) and refused.reason is RejectReason.DECODE_BATCH_FULL


def test_config_refuses_a_nonpositive_tpot_objective() -> None:
    with pytest.raises(ValueError, match="tpot_slo_s"):
        AdmissionConfig(AdmissionMode.SHED, tpot_slo_s=0.0)


@settings(max_examples=80, deadline=None)
@given(
    members=st.integers(0, 7),
    member_input=st.integers(1, 120_000),
    input_tokens=st.integers(1, 9_000),  # below t: PD-P, quick, never late on TTFT
    output_tokens=st.integers(1, 40_000),
)
def test_refused_on_decode_step_exactly_when_the_predicted_step_misses(
    members: int, member_input: int, input_tokens: int, output_tokens: int
) -> None:
    """Below BS_max and within the TTFT objective, the verdict is the step prediction: admitted
    iff T_step(n + 1, mean lifetime context) <= the TPOT objective."""
    s = scheduler()
    decoding(s, members, member_input)
    request = req("r", input_tokens, output=output_tokens)
    batch = members + 1
    context_sum = members * lifetime_context_tokens(member_input, 100)
    context_sum += lifetime_context_tokens(input_tokens, output_tokens)
    step_s = PD.decode_step_s(batch, max(1, round(context_sum / batch)))
    verdict = s.route(request, make_view())
    if step_s <= TPOT_SLO_S:
        assert isinstance(verdict, RouteDecision)
    else:
        assert isinstance(verdict, Rejection)
        assert verdict.reason is RejectReason.DECODE_STEP_OVER_SLO
