"""The router's access log and its summary on stop.

Each finished request is logged by `RouterMetrics.observe` to the `prfaas.access` logger with
its `CompletedRequest` attached. `AccessLog` is the handler `prfaas router` installs: unless
quiet, it writes one line per request on stdout,

    2026-12-03T13:40:01Z cmpl-3f... path=prfaas reason=plentiful-long-to-prfaas
        tokens=612+16 ttft_ms=212.4 e2e_ms=240.1            (one line)

and always keeps running totals, which `summary()` turns into the line printed on stderr when
the router stops. `prfaas up --quiet` runs the router with its stdout discarded, so only the
summary shows.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from prfaas.serve.router.metrics import CompletedRequest, access_log


@dataclass(slots=True)
class _Totals:
    requests: Counter[str] = field(default_factory=Counter)
    ttft_s: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AccessLog(logging.Handler):
    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(logging.INFO)
        self.stream = stream
        self.started_s = time.monotonic()
        self.totals = _Totals()

    def emit(self, record: logging.LogRecord) -> None:
        done = getattr(record, "completed", None)
        if not isinstance(done, CompletedRequest):
            return
        t = self.totals
        t.requests[done.path] += 1
        t.ttft_s[done.path] = t.ttft_s.get(done.path, 0.0) + done.ttft_s
        t.prompt_tokens += done.prompt_tokens
        t.completion_tokens += done.completion_tokens
        if self.stream is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created))
            self.stream.write(f"{stamp} {done.access_line()}\n")
            self.stream.flush()

    def summary(self) -> str:
        t = self.totals
        total = sum(t.requests.values())
        uptime_s = time.monotonic() - self.started_s
        if not total:
            return f"prfaas router: stopped after {uptime_s:.1f} s; no request served"
        paths = ", ".join(
            f"{path} {n} (mean TTFT {t.ttft_s[path] / n * 1e3:.0f} ms)"
            for path, n in sorted(t.requests.items())
        )
        return (
            f"prfaas router: stopped after {uptime_s:.1f} s; served {total} requests: {paths}; "
            f"{t.prompt_tokens:,} prompt + {t.completion_tokens:,} completion tokens"
        )


def install(*, quiet: bool) -> AccessLog:
    """Attach the access log to the `prfaas.access` logger (lines on stdout unless quiet)."""
    handler = AccessLog(None if quiet else sys.stdout)
    access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
    access_log.propagate = False
    return handler
