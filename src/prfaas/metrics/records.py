"""One request's timeline, as observed by whoever served or measured it.

Token times are kept run-length encoded: the first token's time, then runs of equal
inter-token gaps (gap_s, count). A live measurement gives one run per gap (or merges equal
ones); a simulated decode gives one run per stretch of constant batch, so a million simulated
requests of a thousand tokens each cost a few runs apiece instead of a billion floats.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

GapRuns = tuple[tuple[float, int], ...]


def gap_runs(token_times_s: Sequence[float]) -> GapRuns:
    """Run-length encode the gaps between consecutive token times (equal gaps merge)."""
    runs: list[tuple[float, int]] = []
    for a, b in itertools.pairwise(token_times_s):
        gap = b - a
        if runs and runs[-1][0] == gap:
            runs[-1] = (gap, runs[-1][1] + 1)
        else:
            runs.append((gap, 1))
    return tuple(runs)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A finished (or failed) request.

    `first_token_s` is on the same clock as `arrival_s` (None if no token came); `gaps` are the
    inter-token gaps after it as (gap_s, count) runs. A streamed chunk carrying several tokens
    counts as that many tokens at the same instant, so ITL has one zero gap per extra token (as
    vLLM counts them). `error` is None for a completed request and a short reason otherwise;
    `is_rejected` marks an error that is a refusal by admission control (HTTP 429, or the
    simulator's admission), which summaries count apart from failures;
    `path` names how it was served (e.g. "prfaas", "pd-p") when the server says so.
    """

    request_id: str
    arrival_s: float
    input_tokens: int
    first_token_s: float | None = None
    gaps: GapRuns = ()
    error: str | None = None
    path: str | None = None
    cached_tokens: int = 0
    is_rejected: bool = False
    #: Derived once from `gaps` (summaries read them many times per record).
    output_tokens: int = field(init=False)
    decode_s: float = field(init=False)

    def __post_init__(self) -> None:
        if any(gap < 0 or count < 1 for gap, count in self.gaps):
            raise ValueError(f"request {self.request_id}: token times go backwards")
        if self.first_token_s is None and self.gaps:
            raise ValueError(f"request {self.request_id}: gaps without a first token")
        if self.first_token_s is not None and self.first_token_s < self.arrival_s:
            raise ValueError(f"request {self.request_id}: first token before arrival")
        tokens = 0 if self.first_token_s is None else 1 + sum(n for _, n in self.gaps)
        object.__setattr__(self, "output_tokens", tokens)
        object.__setattr__(self, "decode_s", sum(gap * n for gap, n in self.gaps))

    @classmethod
    def from_token_times(
        cls,
        request_id: str,
        arrival_s: float,
        input_tokens: int,
        token_times_s: Sequence[float],
        **details: str | int | bool | None,
    ) -> RequestRecord:
        """A record from every token's arrival time, as a client measures them."""
        first = token_times_s[0] if token_times_s else None
        return cls(request_id, arrival_s, input_tokens, first, gap_runs(token_times_s), **details)  # type: ignore[arg-type]

    @property
    def is_completed(self) -> bool:
        return self.error is None and self.first_token_s is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        if self.first_token_s is None:
            return None
        return self.first_token_s + self.decode_s - self.arrival_s

    @property
    def last_token_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s + self.decode_s

    @property
    def tpot_s(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return self.decode_s / (self.output_tokens - 1)
