"""A 429 from admission control says what was predicted: a decode refusal never reads as a
late first token (a burst on a near-zero-compute deployment got "predicted time to first
token 0.0 s exceeds the objective (decode-batch-full)")."""

from __future__ import annotations

from prfaas.kvcache.ids import RequestId
from prfaas.scheduler import Rejection, RejectReason
from prfaas.serve.router.admission import why_refused


def test_each_reason_says_what_was_predicted() -> None:
    def why(reason: RejectReason) -> str:
        return why_refused(Rejection(RequestId("r"), reason, 1.0, 0.04))

    assert "decode slot" in why(RejectReason.DECODE_BATCH_FULL)
    assert "time-per-token" in why(RejectReason.PREDICTED_TPOT_OVER_SLO)
    assert "first token 0.0 s" in why(RejectReason.PREDICTED_TTFT_OVER_SLO)
    for reason in (RejectReason.DECODE_BATCH_FULL, RejectReason.PREDICTED_TPOT_OVER_SLO):
        assert "first token" not in why(reason)
