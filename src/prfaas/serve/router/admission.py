"""Admission control at the router: the scheduler's `AdmissionPolicy`, applied live.

The policy object is the simulator's (prfaas.scheduler.admission), unchanged; this module only
carries out its verdicts on the HTTP path:

    shed   -> 429 rate_limit_exceeded, `Retry-After: <seconds>` and OpenAI's error JSON;
              prfaas:admission_rejections_total{reason} counts it
    defer  -> the request waits at the router (asyncio.sleep of the verdict's retry period)
              and is routed again, with the time it has waited, until it is admitted or
              rejected as `deferred-too-long`; prfaas:admission_deferrals_total counts waits

Settings live in the deployment file under `router.admission`
(`serve.config.admission_spec`); the TTFT objective is given there, since the router has no
scenario SLO. On (`shed`) by default.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from fastapi.responses import JSONResponse

from prfaas.scheduler import (
    Deferral,
    Rejection,
    RejectReason,
    RouteDecision,
    RouteRequest,
)
from prfaas.serve.errors import NoCapacityError, ServeError

if TYPE_CHECKING:
    from prfaas.serve.router.flow import RouterRuntime


class AdmissionRejectedError(ServeError):
    """429: the request would miss the TTFT objective; retry after `retry_after_s`."""

    status_code = 429
    error_type = "requests"  # OpenAI's type for request-rate limits
    code = "rate_limit_exceeded"

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def response(self) -> JSONResponse:
        """The 429 with its `Retry-After` header (whole seconds, as RFC 9110 requires)."""
        retry = str(max(1, math.ceil(self.retry_after_s)))
        return JSONResponse(self.body(), status_code=429, headers={"Retry-After": retry})


async def route_admitted(
    rt: RouterRuntime, route: RouteRequest, excluded: frozenset[str] = frozenset()
) -> RouteDecision:
    """Route `route` on any instance but `excluded` (those that failed it already), waiting
    out deferrals; raise 429 on an admission rejection, 503 when no instance can take it."""
    started_s = rt.now_s()
    while True:
        now_s = rt.now_s()
        view = rt.registry.view(now_s, excluded)
        decision = rt.scheduler.route(route, view, now_s - started_s)
        if isinstance(decision, Deferral):
            rt.metrics.admission_deferrals.inc()
            await asyncio.sleep(decision.retry_after_s)
            continue
        if isinstance(decision, Rejection):
            if decision.retry_after_s is None:
                raise NoCapacityError(f"no instance can take the request: {decision.reason}")
            rt.metrics.admission_rejections.labels(decision.reason.value).inc()
            raise AdmissionRejectedError(
                f"overloaded: {why_refused(decision)} ({decision.reason.value}); retry after "
                f"{decision.retry_after_s:g} s",
                decision.retry_after_s,
            )
        return decision


def why_refused(rejection: Rejection) -> str:
    """What admission control predicted, in the client's terms."""
    if rejection.reason is RejectReason.DECODE_BATCH_FULL:
        return "every decode slot is taken or promised to earlier requests for this one's decode"
    if rejection.reason is RejectReason.PREDICTED_TPOT_OVER_SLO:
        return "the decode batch it would join would miss the time-per-token objective"
    predicted = rejection.predicted_ttft_s or 0.0
    return f"predicted time to first token {predicted:.1f} s exceeds the objective"
