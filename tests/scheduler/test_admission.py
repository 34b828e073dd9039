"""Admission control: the TTFT prediction, each mode's verdict, and the scheduler's handling."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_fixtures import (
    FAST,
    GB,
    THRESHOLD_TOKENS,
    LinearProfile,
    make_config,
    make_view,
    req,
)

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import (
    AdmissionConfig,
    AdmissionMode,
    AdmissionPolicy,
    Deferral,
    GlobalScheduler,
    LinkView,
    PrfaasPolicy,
    Rejection,
    RejectReason,
    RouteDecision,
    ServePath,
    predict_ttft_s,
)
from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.load import DispatchLedger


def scheduler(mode: AdmissionMode, slo_s: float = 2.0, **kwargs: object) -> GlobalScheduler:
    config = make_config(burst_enter_s=math.inf)  # keep short requests at PD-P (burst rule off)
    admission = AdmissionPolicy(AdmissionConfig(mode, ttft_slo_s=slo_s, **kwargs))  # type: ignore[arg-type]
    return GlobalScheduler(PrfaasPolicy(config), config, THRESHOLD_TOKENS, admission=admission)


def fill_pd_p(s: GlobalScheduler, work_s: float) -> None:
    """Queue `work_s` of prefill on both PD-P instances (the ledger is the scheduler's view)."""
    for name in ("p0", "p1"):
        s.ledger.dispatch(RequestId(f"fill-{name}"), InstanceId(name), work_s, InstanceId("d1"), 0)


def test_prediction_pd_p_is_queue_plus_own_prefill() -> None:
    s = scheduler(AdmissionMode.OFF)
    fill_pd_p(s, 3.0)
    decision = s.route(req("r", 5_000), make_view())
    assert isinstance(decision, RouteDecision) and decision.path is ServePath.PD_P
    s.ledger.decode_done(decision.request_id)  # judge it against the queue ahead only
    # SLOW profile: 0.2 + 4e-5 * 5000 = 0.4 s of own prefill behind 3 s of queue.
    got = predict_ttft_s(decision, req("r", 5_000), make_view(), s.ledger, s.config)
    assert got == pytest.approx(3.4)


def test_prediction_prfaas_is_bounded_by_link_backlog() -> None:
    s = scheduler(AdmissionMode.OFF)
    request = req("r", 20_000)
    decision = s.route(request, make_view())
    view = make_view(LinkView(1 * GB, bytes_waiting=4 * GB, rtt_s=0.02))
    assert isinstance(decision, RouteDecision) and decision.path is ServePath.PRFAAS
    s.ledger.decode_done(decision.request_id)
    # Link: (4 GB + 20K x 1 KB) / 1 GB/s = 4.02 s beats the 0.3 s prefill; plus RTT/2.
    assert predict_ttft_s(decision, request, view, s.ledger, s.config) == pytest.approx(4.03)


def test_off_admits_everything() -> None:
    s = scheduler(AdmissionMode.OFF)
    fill_pd_p(s, 100.0)
    assert isinstance(s.route(req("r", 5_000), make_view()), RouteDecision)


def test_shed_rejects_with_reason_and_retry_after() -> None:
    s = scheduler(AdmissionMode.SHED, slo_s=2.0)
    fill_pd_p(s, 10.0)
    decision = s.route(req("r", 5_000), make_view())
    assert isinstance(decision, Rejection)
    assert decision.reason is RejectReason.PREDICTED_TTFT_OVER_SLO
    assert decision.predicted_ttft_s == pytest.approx(10.4)
    assert decision.retry_after_s == 9.0  # ceil(10.4 - 2.0)
    assert s.reasons["rejected:predicted-ttft-over-slo"] == 1
    assert len(s.ledger) == 2  # nothing dispatched for the rejected request


def test_shed_admits_within_slo_and_margin() -> None:
    s = scheduler(AdmissionMode.SHED, slo_s=2.0, margin_fraction=0.5)
    fill_pd_p(s, 2.5)  # predicted 2.9 s: over the SLO, within 2 x 1.5 = 3 s
    assert isinstance(s.route(req("r", 5_000), make_view()), RouteDecision)


def test_defer_then_reject_when_waited_too_long() -> None:
    s = scheduler(AdmissionMode.DEFER, slo_s=2.0, max_defer_s=10.0)
    fill_pd_p(s, 4.0)  # predicted 4.4 s: 3 s retry
    first = s.route(req("r", 5_000), make_view())
    assert isinstance(first, Deferral) and first.retry_after_s == 3.0
    again = s.route(req("r", 5_000), make_view(), waited_s=7.5)
    assert isinstance(again, Rejection) and again.reason is RejectReason.DEFERRED_TOO_LONG
    assert s.reasons["deferred"] == 1


def test_defer_admits_once_the_queue_drained() -> None:
    s = scheduler(AdmissionMode.DEFER, slo_s=2.0)
    fill_pd_p(s, 4.0)
    assert isinstance(s.route(req("r", 5_000), make_view()), Deferral)
    for name in ("p0", "p1"):
        s.ledger.decode_done(RequestId(f"fill-{name}"))
    assert isinstance(s.route(req("r", 5_000), make_view(), waited_s=3.0), RouteDecision)


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="ttft_slo_s"):
        AdmissionConfig(AdmissionMode.SHED, ttft_slo_s=0)
    with pytest.raises(ValueError, match="margin"):
        AdmissionConfig(AdmissionMode.SHED, margin_fraction=-0.1)


def test_a_full_decode_batch_is_refused_even_when_prefill_is_quick() -> None:
    s = scheduler(AdmissionMode.SHED, slo_s=2.0)
    # The fixture's decode instances hold BS_max = 8; fill d0 and d1 past their prefills.
    for k in range(16):
        rid = RequestId(f"dec-{k}")
        s.ledger.dispatch(rid, InstanceId("p0"), 0.0, InstanceId(f"d{k % 2}"), 0)
        s.ledger.prefill_done(rid)
    decision = s.route(req("r", 5_000), make_view())
    assert isinstance(decision, Rejection) and decision.reason is RejectReason.DECODE_BATCH_FULL
    assert decision.retry_after_s == 1.0
    s.ledger.decode_done(RequestId("dec-0"))  # a slot frees on d0
    assert isinstance(s.route(req("r2", 5_000), make_view()), RouteDecision)


def fill_decode(s: GlobalScheduler, first_token_s: float, decode_end_s: float, done: bool) -> None:
    """BS_max = 8 requests on each decode instance, with the given predicted decode windows,
    past their prefill (`done`) or still in it (with no prefill work queued)."""
    for k in range(16):
        rid = RequestId(f"dec-{k}")
        decode = InstanceId(f"d{k % 2}")
        s.ledger.dispatch(
            rid,
            InstanceId("p0"),
            0.0,
            decode,
            0,
            first_token_s=first_token_s,
            decode_end_s=decode_end_s,
        )
        if done:
            s.ledger.prefill_done(rid)


def test_slots_promised_to_requests_still_in_prefill_refuse_a_new_decode() -> None:
    # Nothing decodes yet, but 8 requests per decode instance finish their prefill at 1 s and
    # decode until 100 s: this request's decode (from ~0.4 s on) would find every slot taken.
    s = scheduler(AdmissionMode.SHED, slo_s=2.0)
    fill_decode(s, first_token_s=1.0, decode_end_s=100.0, done=False)
    decision = s.route(req("r", 5_000), make_view())
    assert isinstance(decision, Rejection) and decision.reason is RejectReason.DECODE_BATCH_FULL


def test_decodes_predicted_to_end_before_the_first_token_leave_their_slots_free() -> None:
    # Both batches are full now, but predicted to end at 0.3 s, before this request's first
    # token (its 5K-token prefill takes 0.4 s): it is admitted.
    s = scheduler(AdmissionMode.SHED, slo_s=2.0)
    fill_decode(s, first_token_s=0.0, decode_end_s=0.3, done=True)
    assert isinstance(s.route(req("r", 5_000), make_view()), RouteDecision)
    # A decode running past its prediction holds its slot until it is reported done.
    late = scheduler(AdmissionMode.SHED, slo_s=2.0)
    fill_decode(late, first_token_s=0.0, decode_end_s=0.0, done=True)
    assert isinstance(late.route(req("r", 5_000), make_view()), Rejection)


@dataclass(frozen=True)
class KvBoundProfile(LinearProfile):
    """A decode step that reads every context's KV: 2.5 us per request per 10 tokens."""

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return 2.5e-7 * batch_size * context_tokens


def test_a_tpot_objective_refuses_a_batch_whose_step_would_miss_it() -> None:
    # The fixture's decode step: 20 ms at 8 requests of 10K-token contexts, 10 ms at 4 (a
    # KV-bound step: batch x context). 3 requests decode on each decode instance: with this
    # one 4, 10 ms per step. Held to 9 ms, it is refused; to 12 ms, admitted.
    def scheduler_with(tpot_slo_s: float) -> GlobalScheduler:
        config = SchedulerConfig(FAST, KvBoundProfile(0.2, 4e-5), burst_enter_s=math.inf)  # type: ignore[arg-type]
        admission = AdmissionConfig(AdmissionMode.SHED, ttft_slo_s=2.0, tpot_slo_s=tpot_slo_s)
        s = GlobalScheduler(
            PrfaasPolicy(config), config, THRESHOLD_TOKENS, admission=AdmissionPolicy(admission)
        )
        for k in range(6):
            rid = RequestId(f"dec-{k}")
            decode = InstanceId(f"d{k % 2}")
            s.ledger.dispatch(
                rid, InstanceId("p0"), 0.0, decode, 0, decode_end_s=100.0, context_tokens=10_000
            )
            s.ledger.prefill_done(rid)
        return s

    strict = scheduler_with(0.009).route(req("r", 9_950), make_view())
    assert isinstance(strict, Rejection)
    assert strict.reason is RejectReason.PREDICTED_TPOT_OVER_SLO
    assert isinstance(scheduler_with(0.012).route(req("r", 9_950), make_view()), RouteDecision)
    # Without a TPOT objective only BS_max bounds the batch (8 here): admitted.
    assert isinstance(
        scheduler(AdmissionMode.SHED).route(req("r", 9_950), make_view()), RouteDecision
    )


@settings(max_examples=60, deadline=None)
@given(
    slots=st.lists(
        st.tuples(st.floats(0, 50), st.floats(0, 50), st.booleans()), min_size=0, max_size=12
    ),
    start_s=st.floats(0, 60),
    length_s=st.floats(0.001, 60),
    now_s=st.floats(0, 10),
)
def test_decode_overlap_peak_is_the_most_slots_held_at_once(
    slots: list[tuple[float, float, bool]], start_s: float, length_s: float, now_s: float
) -> None:
    """The sweep equals a brute-force count at every window boundary inside the query."""
    ledger = DispatchLedger()
    windows = []
    for k, (first_s, end_s, done) in enumerate(slots):
        rid = RequestId(f"r{k}")
        ledger.dispatch(
            rid, InstanceId("p"), 0.0, InstanceId("d"), 0, first_token_s=first_s, decode_end_s=end_s
        )
        if done:
            ledger.prefill_done(rid)
        begin = now_s if done else max(first_s, now_s)
        windows.append((begin, end_s if end_s > now_s else math.inf))
    end_q = start_s + length_s
    points = [start_s] + [b for b, _ in windows if start_s <= b < end_q]
    brute = max((sum(1 for b, e in windows if b <= t < e) for t in points), default=0)
    assert ledger.decode_overlap(InstanceId("d"), start_s, end_q, now_s).peak == brute


@settings(max_examples=60, deadline=None)
@given(
    input_tokens=st.integers(1, 200_000),
    slo_s=st.floats(0.05, 60.0),
    mode=st.sampled_from([AdmissionMode.SHED, AdmissionMode.DEFER]),
)
def test_an_idle_system_refuses_only_what_its_own_prefill_cannot_meet(
    input_tokens: int, slo_s: float, mode: AdmissionMode
) -> None:
    """Nothing queued, nothing on the link, no decode batch: the prediction is the request's
    bare prefill (and its KV across, for PrfaaS), so a request that fits is always admitted and
    no refusal is ever blamed on a full decode batch."""
    s = scheduler(mode, slo_s=slo_s)
    view = make_view()
    request = req("r", input_tokens)
    decision = s.route(request, view)
    if isinstance(decision, RouteDecision):
        return
    bare = scheduler(AdmissionMode.OFF).route(request, view)
    assert isinstance(bare, RouteDecision)
    if isinstance(decision, Rejection):
        assert decision.reason is not RejectReason.DECODE_BATCH_FULL
    predicted = predict_ttft_s(bare, request, view, s.ledger, s.config)
    assert predicted > slo_s  # refused (or deferred) only when even an idle system is late
