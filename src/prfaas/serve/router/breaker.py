"""An instance's own failures, counted per instance: when to stop placing requests on it.

A request that fails on an instance whose shell still answers its health probe (its engine
died, its answers are 5xx) is retried elsewhere (`serve.router.flow`), but the polls of `/state`
keep calling the instance healthy. Its own failures then take it out: a circuit breaker,
closed -> open -> half-open, on the router's clock (seconds passed in, no clock read here):

    closed     every success resets the count; `threshold` failures in a row open it
    open       `cooldown_s`: the scheduler sees the instance as not accepting
    half-open  after the cooldown it accepts again; its next answer decides: a success
               closes the breaker, a failure opens it for another cooldown at once
"""

from __future__ import annotations

from dataclasses import dataclass

FAILURES_TO_OPEN = 3
COOLDOWN_S = 10.0


@dataclass(slots=True)
class FailureBreaker:
    """One instance's breaker (see the module docstring)."""

    threshold: int = FAILURES_TO_OPEN
    cooldown_s: float = COOLDOWN_S
    failures_in_a_row: int = 0
    open_until_s: float | None = None

    def failed(self, now_s: float) -> None:
        """A request failed on this instance (its own failure, not the request's 4xx)."""
        self.failures_in_a_row += 1
        if self.failures_in_a_row >= self.threshold:
            self.open_until_s = now_s + self.cooldown_s

    def succeeded(self) -> None:
        """A request completed on this instance: it is healthy again."""
        self.failures_in_a_row = 0
        self.open_until_s = None

    def is_open(self, now_s: float) -> bool:
        """Whether nothing may be placed on the instance now."""
        return self.open_until_s is not None and now_s < self.open_until_s
