"""Admission control: admit, shed or defer a request whose predicted TTFT misses the SLO.

Past saturation a fair FCFS queue makes *every* request late: each new arrival joins behind
work it cannot overtake, so goodput collapses (docs/simulation.md, SLO capacity). Production
routers refuse the excess instead (HTTP 429 with Retry-After) so that the requests they do take
meet their SLO. This is that refusal, as one pure policy object shared by the simulator and the
live router (serve.router.admission): time is passed in, nothing is measured here.

The prediction uses only what the scheduler already holds at decision time, for the instance
placement chose:

    queue_s    = the ledger's outstanding prefill seconds on the chosen prefill instance
    prefill_s  = this request's own prefill of its uncached tokens there
    move_s     = a cross-cluster prefix move first, its bytes / the link's measured rate
    PrfaaS:    TTFT ~ max(move_s + queue_s + prefill_s, (bytes waiting + S_kv(l)) / rate) + RTT/2
               (KV streams while prefill runs, so the later of prefill end and link drain)
    PD-P:      TTFT ~ move_s + queue_s + prefill_s (RDMA is never the bottleneck, Eq. 4)

Decode is judged too. Every dispatched request has a predicted decode window: from its first
token (dispatch time + its predicted TTFT) to the end of its output at a full batch's step time
(`decode_window_s`). When BS_max of the requests dispatched to the chosen decode instance are
predicted to hold a slot at some moment of this request's window, it would wait for a slot or
make one of them wait; that first inter-token gap would hold the wait, so it would miss the
TPOT objective however fast its prefill is. It is refused (`decode-batch-full`) or deferred
like a late prediction. Requests still in prefill count from their predicted first token (a
batch about to be filled is as full as a filled one), decodes predicted to end before this
one's first token do not count, and a decode running past its prediction holds its slot until
it is reported done. With a TPOT objective (`tpot_slo_s`), the step of the batch it would
join (that peak plus itself, at their mean context) is held to it as well
(`predicted-tpot-over-slo`): on a KV-bound model a full batch of long contexts misses TPOT.

The ledger counts a running prefill at its full estimate (it does not know how far it got), so
the prediction errs late by at most one prefill; `margin_fraction` sets how far past the SLO
a prediction may go before the request is refused.

Modes: `off` admits everything (the old behaviour, bit for bit); `shed` rejects with reason
`predicted-ttft-over-slo` and a Retry-After of the predicted excess; `defer` holds the request
at the router and retries it every `retry_after_s` until its prediction (from then on) fits,
rejecting it with `deferred-too-long` once it has waited `max_defer_s`. Deferred requests only
enter when there is slack, so they never push admitted ones past the SLO; they trade their own
TTFT for fewer refusals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from prfaas.scheduler.config import SchedulerConfig
from prfaas.scheduler.decisions import Deferral, Rejection, RejectReason, RouteDecision, ServePath
from prfaas.scheduler.load import DispatchLedger
from prfaas.scheduler.view import ClusterView, Role, RouteRequest


class AdmissionMode(StrEnum):
    OFF = "off"
    SHED = "shed"
    DEFER = "defer"


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Defaults and their reasons are in docs/scheduler.md (Admission control).

    `ttft_slo_s`: the TTFT objective the prediction is held to. `tpot_slo_s`: the TPOT
    objective the decode step is held to (None: the decode batch is bounded by BS_max only).
    `margin_fraction`: refuse when
    the prediction exceeds ttft_slo_s x (1 + margin_fraction). `min_retry_after_s`: the least
    Retry-After given (and the defer retry period floor). `max_defer_s`: how long defer mode
    holds a request before rejecting it.
    """

    mode: AdmissionMode = AdmissionMode.OFF
    ttft_slo_s: float = 10.0
    tpot_slo_s: float | None = None
    margin_fraction: float = 0.0
    min_retry_after_s: float = 1.0
    max_defer_s: float = 30.0

    def __post_init__(self) -> None:
        if self.ttft_slo_s <= 0:
            raise ValueError("ttft_slo_s must be positive")
        if self.tpot_slo_s is not None and self.tpot_slo_s <= 0:
            raise ValueError("tpot_slo_s must be positive")
        if self.margin_fraction < 0:
            raise ValueError("margin_fraction must be >= 0")
        if self.min_retry_after_s <= 0 or self.max_defer_s < 0:
            raise ValueError("min_retry_after_s must be > 0 and max_defer_s >= 0")

    @property
    def limit_s(self) -> float:
        return self.ttft_slo_s * (1.0 + self.margin_fraction)


def predict_ttft_s(
    decision: RouteDecision,
    request: RouteRequest,
    view: ClusterView,
    ledger: DispatchLedger,
    config: SchedulerConfig,
) -> float:
    """The request's TTFT if dispatched as `decision` now (see the module docstring)."""
    on_prfaas = decision.path is ServePath.PRFAAS
    link = view.link
    rate = max(link.capacity_bytes_per_s, 1e-9)
    move_s = 0.0
    if decision.cache_move is not None:
        move_s = config.kv_bytes(decision.cache_move.tokens) / rate
    prefill_end_s = (
        move_s
        + ledger.prefill_work_s(decision.prefill_instance_id)
        + config.prefill_s(on_prfaas, decision.uncached_tokens)
    )
    if not on_prfaas:
        return prefill_end_s
    send_s = (link.bytes_waiting + config.kv_bytes(request.input_tokens)) / rate
    return max(prefill_end_s, send_s) + link.rtt_s / 2


def _decode_batch_limit(decision: RouteDecision, view: ClusterView) -> int:
    """BS_max of the chosen decode instance (0: unknown)."""
    for inst in view.accepting(Role.PD_DECODE):
        if inst.instance_id == decision.decode_instance_id:
            return inst.max_batch_size
    return 0


def decode_context_tokens(request: RouteRequest) -> int:
    """The request's mean context over its decode: its prompt and half its output."""
    return request.input_tokens + request.output_tokens // 2


def decode_window_s(
    decision: RouteDecision,
    request: RouteRequest,
    view: ClusterView,
    ledger: DispatchLedger,
    config: SchedulerConfig,
) -> tuple[float, float]:
    """When the request is predicted to take its decode slot (its first token) and to leave
    it (its output at a full batch's step time), as absolute times."""
    first_token_s = view.now_s + predict_ttft_s(decision, request, view, ledger, config)
    batch = max(1, _decode_batch_limit(decision, view))
    step_s = config.decode_step_s(batch, decode_context_tokens(request))
    return first_token_s, first_token_s + request.output_tokens * step_s


def _decode_refusal(
    decision: RouteDecision,
    request: RouteRequest,
    view: ClusterView,
    ledger: DispatchLedger,
    config: SchedulerConfig,
    *,
    tpot_slo_s: float | None,
) -> RejectReason | None:
    """Why the chosen decode instance cannot take this request in time, if it cannot: BS_max
    requests predicted to hold its slots at some moment of this request's decode, or (with a
    TPOT objective) the step of that batch, with this request, at its members' mean context
    over the objective (see the module docstring)."""
    limit = _decode_batch_limit(decision, view)
    if limit <= 0:
        return None
    first_s, last_s = decode_window_s(decision, request, view, ledger, config)
    last_s = max(last_s, math.nextafter(first_s, math.inf))
    overlap = ledger.decode_overlap(decision.decode_instance_id, first_s, last_s, view.now_s)
    if overlap.peak >= limit:
        return RejectReason.DECODE_BATCH_FULL
    if tpot_slo_s is None:
        return None
    context = (overlap.context_tokens + decode_context_tokens(request)) / (overlap.count + 1)
    step_s = config.decode_step_s(overlap.peak + 1, round(context))
    return RejectReason.PREDICTED_TPOT_OVER_SLO if step_s > tpot_slo_s else None


class AdmissionPolicy:
    """Judges a placed decision: None (admit), a `Rejection` or a `Deferral`."""

    def __init__(self, config: AdmissionConfig) -> None:
        self.config = config

    def judge(
        self,
        decision: RouteDecision,
        request: RouteRequest,
        view: ClusterView,
        ledger: DispatchLedger,
        config: SchedulerConfig,
        *,
        waited_s: float = 0.0,
    ) -> Rejection | Deferral | None:
        """`waited_s`: how long the request has been deferred already (0 for a new one)."""
        cfg = self.config
        if cfg.mode is AdmissionMode.OFF:
            return None
        predicted_s = predict_ttft_s(decision, request, view, ledger, config)
        excess_s = predicted_s - cfg.limit_s
        reason = RejectReason.PREDICTED_TTFT_OVER_SLO
        if excess_s <= 0:
            decode = _decode_refusal(
                decision, request, view, ledger, config, tpot_slo_s=cfg.tpot_slo_s
            )
            if decode is None:
                return None
            reason, excess_s = decode, 0.0
        retry_s = float(max(cfg.min_retry_after_s, math.ceil(excess_s)))
        if cfg.mode is AdmissionMode.DEFER:
            if waited_s + retry_s <= cfg.max_defer_s:
                return Deferral(request.request_id, retry_s, predicted_s)
            return Rejection(
                request.request_id, RejectReason.DEFERRED_TOO_LONG, retry_s, predicted_s
            )
        return Rejection(request.request_id, reason, retry_s, predicted_s)
