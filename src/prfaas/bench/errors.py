"""Errors of the benchmark client, each a one-line message the CLI prints as is.

    BenchError (ValueError)
    ├── WorkloadSpecError   a `--workload` spec or flag combination that does not parse
    ├── TraceLineError      a malformed trace line (the lines before it still run)
    └── EndpointError       the endpoint is unreachable or does not speak the OpenAI API

Per-request problems (an HTTP 503, an error event in a stream, a timeout) are not exceptions:
they become failed `RequestRecord`s with a short reason, counted in the report.
"""

from __future__ import annotations


class BenchError(ValueError):
    """Base of every user-facing benchmark error."""


class WorkloadSpecError(BenchError):
    pass


class TraceLineError(BenchError):
    pass


class EndpointError(BenchError):
    pass
