"""Per-request records and their summaries, shared by the simulator and the benchmark client.

One definition of every metric, so `prfaas simulate` and `prfaas bench` report comparable
numbers (vLLM `bench serve` / AIPerf vocabulary):

- TTFT: first token time - arrival.
- TPOT: per request, (last token - first token) / (output tokens - 1); undefined for one token.
- ITL: every gap between consecutive tokens of a request, pooled over requests.
- E2E: last token (or finish) - arrival.
- Goodput: completed requests per second that met every SLO given.
- Duration: first arrival -> last token of the run (the simulator's and the bench's alike);
  request/token throughput and goodput are per second of it.
- Steady throughput (`steady_throughput`): completions per second from the end of the
  warm-up to the last arrival, the capacity of a deployment driven above saturation.

`prfaas.metrics.schema` is the JSON schema of the summary (`prfaas.metrics/1`), defined once.

Times are plain seconds on any clock (simulated or wall); nothing here reads a clock.
"""

from prfaas.metrics.records import RequestRecord
from prfaas.metrics.schema import SCHEMA_ID, MetricsModel, metrics_json_schema, validate_metrics
from prfaas.metrics.summary import (
    Distribution,
    MetricsSummary,
    Slo,
    SteadyThroughput,
    steady_throughput,
    summarize,
)

__all__ = [
    "SCHEMA_ID",
    "Distribution",
    "MetricsModel",
    "MetricsSummary",
    "RequestRecord",
    "Slo",
    "SteadyThroughput",
    "metrics_json_schema",
    "steady_throughput",
    "summarize",
    "validate_metrics",
]
