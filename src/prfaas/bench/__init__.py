"""`prfaas bench`: a load generator that replays a trace (or synthetic load) against any
OpenAI-compatible endpoint and reports what the field reports, in the simulator's schema.

    arrivals   when to send what: a Mooncake trace by timestamp, or lengths + gamma gaps
    prompts    text of the right token length with the trace's shared-prefix structure
    client     one streamed `/v1/completions` request -> a `prfaas.metrics.RequestRecord`
    runner     pacing, bounded concurrency, early stop with a partial result

May import `workload` and `metrics` only (docs/architecture.md); the CLI shell (`prfaas.cli.bench`)
draws the progress bar and the table. Guide: docs/bench.md.
"""

from __future__ import annotations

from prfaas.bench.arrivals import (
    Arrival,
    SyntheticSpec,
    count_trace_requests,
    parse_workload_spec,
    synthetic_arrivals,
    trace_arrivals,
)
from prfaas.bench.client import Api
from prfaas.bench.errors import BenchError, EndpointError, TraceLineError, WorkloadSpecError
from prfaas.bench.prompts import PromptSynthesizer, TokenUnit
from prfaas.bench.runner import BenchConfig, BenchResult, run_bench

__all__ = [
    "Api",
    "Arrival",
    "BenchConfig",
    "BenchError",
    "BenchResult",
    "EndpointError",
    "PromptSynthesizer",
    "SyntheticSpec",
    "TokenUnit",
    "TraceLineError",
    "WorkloadSpecError",
    "count_trace_requests",
    "parse_workload_spec",
    "run_bench",
    "synthetic_arrivals",
    "trace_arrivals",
]
