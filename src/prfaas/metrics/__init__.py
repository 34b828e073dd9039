"""Per-request records and their summaries, shared by the simulator and the benchmark client.

One definition of every metric, so `prfaas simulate` and `prfaas bench` report comparable
numbers (vLLM `bench serve` / AIPerf vocabulary):

- TTFT: first token time - arrival.
- TPOT: per request, (last token - first token) / (output tokens - 1); undefined for one token.
- ITL: every gap between consecutive tokens of a request, pooled over requests.
- E2E: last token (or finish) - arrival.
- Goodput: completed requests per second that met every SLO given.

Times are plain seconds on any clock (simulated or wall); nothing here reads a clock.
"""

from prfaas.metrics.records import RequestRecord
from prfaas.metrics.summary import Distribution, MetricsSummary, Slo, summarize

__all__ = ["Distribution", "MetricsSummary", "RequestRecord", "Slo", "summarize"]
