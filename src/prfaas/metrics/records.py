"""One request's timeline, as observed by whoever served or measured it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A finished (or failed) request.

    `token_times_s` holds the arrival time of every output token, the first one included, on the
    same clock as `arrival_s`. A streamed chunk carrying several tokens is recorded as that many
    tokens at the same instant, so ITL has one zero gap per extra token (as vLLM counts them).
    `error` is None for a completed request and a short reason otherwise; `path` names how it was
    served (e.g. "prfaas", "pd-p") when the server says so.
    """

    request_id: str
    arrival_s: float
    input_tokens: int
    token_times_s: tuple[float, ...] = ()
    error: str | None = None
    path: str | None = None
    cached_tokens: int = 0

    def __post_init__(self) -> None:
        times = self.token_times_s
        if any(b < a for a, b in itertools.pairwise(times)):
            raise ValueError(f"request {self.request_id}: token times go backwards")
        if times and times[0] < self.arrival_s:
            raise ValueError(f"request {self.request_id}: first token before arrival")

    @property
    def is_completed(self) -> bool:
        return self.error is None and bool(self.token_times_s)

    @property
    def output_tokens(self) -> int:
        return len(self.token_times_s)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] - self.arrival_s if self.token_times_s else None

    @property
    def e2e_s(self) -> float | None:
        return self.token_times_s[-1] - self.arrival_s if self.token_times_s else None

    @property
    def tpot_s(self) -> float | None:
        if len(self.token_times_s) < 2:
            return None
        return (self.token_times_s[-1] - self.token_times_s[0]) / (len(self.token_times_s) - 1)

    @property
    def itls_s(self) -> list[float]:
        times = self.token_times_s
        return [b - a for a, b in itertools.pairwise(times)]
