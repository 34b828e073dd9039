"""A workload as the planner sees it: the uncached input lengths prefill must compute, and the
mean prompt and output lengths decode must hold and generate.

Two sources: a synthetic one (an input and an output length distribution, no prefix hits, as in
the paper's case study) and a Mooncake-format trace replayed through a prefix cache of a given
capacity, whose *post-prefix-match* lengths are what the threshold is searched over (paper
section 4). Decode sees the whole prompt either way: cached or not, its KV sits in the decode
instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prfaas.workload.lengths import EmpiricalLengths, LengthDistribution
from prfaas.workload.prefix import PrefixReplay, replay_prefix_cache
from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, TraceRequest


@dataclass(frozen=True, slots=True)
class Workload:
    """Lengths the steady-state model needs (paper section 4 notation in brackets).

    `uncached_input`: tokens each prefill computes [the distribution of l];
    `mean_input_tokens`: whole prompt, cached part included (decode context);
    `mean_output_tokens`: [L_out]; `prefix_hit_fraction`: share of prompt tokens from the cache.
    """

    uncached_input: LengthDistribution
    mean_input_tokens: float
    mean_output_tokens: float
    prefix_hit_fraction: float
    description: str

    @property
    def mean_decode_context_tokens(self) -> float:
        """Average context a decode step attends to: the prompt plus half the output."""
        return self.mean_input_tokens + self.mean_output_tokens / 2

    @classmethod
    def synthetic(
        cls, input_lengths: LengthDistribution, output_lengths: LengthDistribution, description: str
    ) -> Workload:
        """Independent input and output lengths, no prefix hits."""
        return cls(
            uncached_input=input_lengths,
            mean_input_tokens=input_lengths.mean_tokens,
            mean_output_tokens=output_lengths.mean_tokens,
            prefix_hit_fraction=0.0,
            description=description,
        )

    @classmethod
    def from_trace(
        cls,
        requests: Sequence[TraceRequest],
        capacity_blocks: int | None,
        description: str,
        block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    ) -> Workload:
        """Post-prefix-match lengths with a cache of `capacity_blocks` (None: unbounded)."""
        replay = replay_prefix_cache(requests, capacity_blocks, block_tokens)
        return cls.from_replay(requests, replay, description)

    @classmethod
    def from_replay(
        cls, requests: Sequence[TraceRequest], replay: PrefixReplay, description: str
    ) -> Workload:
        """The lengths a replay of `requests` left uncached (this module's or a pool model's)."""
        num = len(requests)
        return cls(
            uncached_input=(
                EmpiricalLengths.of(replay.uncached_tokens)
                if replay.routed_tokens is None
                else EmpiricalLengths.of(replay.routed_tokens, replay.uncached_tokens)
            ),
            mean_input_tokens=sum(r.input_tokens for r in requests) / num,
            mean_output_tokens=sum(r.output_tokens for r in requests) / num,
            prefix_hit_fraction=replay.hit_fraction,
            description=description,
        )
