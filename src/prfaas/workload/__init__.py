"""Workloads: length distributions, Mooncake-format traces and the prefix-cache replay that turns
a trace into the post-prefix-match lengths the planner optimises over. Pure logic
(docs/architecture.md)."""

from __future__ import annotations

from prfaas.workload.lengths import (
    EmpiricalLengths,
    FixedLength,
    LengthDistribution,
    LengthHistogram,
    ThresholdSplit,
    TruncatedLognormal,
)
from prfaas.workload.prefix import LruBlockCache, PrefixReplay, replay_prefix_cache
from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest, read_mooncake_trace
from prfaas.workload.workload import Workload

__all__ = [
    "MOONCAKE_BLOCK_TOKENS",
    "EmpiricalLengths",
    "FixedLength",
    "LengthDistribution",
    "LengthHistogram",
    "LruBlockCache",
    "PrefixReplay",
    "ThresholdSplit",
    "TraceRequest",
    "TruncatedLognormal",
    "Workload",
    "read_mooncake_trace",
    "replay_prefix_cache",
]
