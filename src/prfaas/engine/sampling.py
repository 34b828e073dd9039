"""Sampling parameters and the per-request sampler.

Greedy when `temperature < MIN_TEMPERATURE` (0 included: float32 logits divided by a denormal
such as 1e-45 overflow to inf); otherwise temperature, then top-k, then top-p (nucleus, always
keeping the most likely token, so a top_p that underflows float32 is greedy rather than an
empty distribution), drawn from a `torch.Generator` seeded per request, so a request's tokens
do not depend on what else shares its batch.

No parameter value can make the sampler raise inside a batch step (which would fail every
request in the batch): `SamplingParams` refuses what the engine cannot honour (a seed outside
signed 64 bits, non-finite values, empty stop strings) with a `BadRequestError` at submit
time, and a distribution that still comes out invalid falls back to the greedy token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import torch

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.errors import BadRequestError

MIN_TEMPERATURE = 1e-5  # below: greedy (as vLLM's _SAMPLING_EPS)
MAX_LOGPROBS = 20  # top alternatives per token at most (vLLM's default max_logprobs)
MIN_LOGPROB = -9999.0  # what -inf is reported as (JSON has no infinity; vLLM does the same)
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # what torch.Generator.manual_seed takes, signed


class FinishReason(StrEnum):
    LENGTH = "length"
    EOS = "eos"
    STOP = "stop"


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; k: the sampled token's and the top k's

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise BadRequestError(f"max_tokens must be positive, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and math.isfinite(self.top_p)):
            raise BadRequestError("temperature and top_p must be finite")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise BadRequestError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            raise BadRequestError(f"seed must be in [{SEED_MIN}, {SEED_MAX}]")
        if any(not stop for stop in self.stop):
            raise BadRequestError("stop strings must not be empty")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise BadRequestError(f"logprobs must be in [0, {MAX_LOGPROBS}]")


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """A generated token's log-probability and the `top` most likely tokens' (id, logprob),
    best first. From the model's raw logits (log_softmax before temperature, top-k and
    top-p), as vLLM's default `raw_logprobs`: what the model thinks, whatever the sampler
    then did with it."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprob(logits: torch.Tensor, token_id: int, num_top: int) -> TokenLogprob:
    """`token_id`'s log-probability under `logits` and the `num_top` best tokens'."""
    logprobs = torch.log_softmax(logits.float(), dim=-1).clamp(min=MIN_LOGPROB)
    top: tuple[tuple[int, float], ...] = ()
    if num_top:
        best = torch.topk(logprobs, min(num_top, logprobs.numel()))
        pairs = zip(best.indices.tolist(), best.values.tolist(), strict=True)
        top = tuple((int(i), float(v)) for i, v in pairs)
    return TokenLogprob(token_id, float(logprobs[token_id]), top)


class Sampler:
    """Picks the next token of one request from its last logits."""

    def __init__(self, params: SamplingParams) -> None:
        self._params = params
        self._generator = torch.Generator().manual_seed(params.seed)

    def sample(self, logits: torch.Tensor) -> int:
        p = self._params
        if p.temperature < MIN_TEMPERATURE:
            return int(torch.argmax(logits).item())
        scores = logits.float() / p.temperature
        if p.top_k:
            kth = torch.topk(scores, min(p.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if p.top_p < 1:
            ordered, order = torch.sort(scores, descending=True)
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(ordered, dim=-1) >= p.top_p
            drop[0] = False  # the most likely token always stays
            scores = scores.scatter(0, order[drop], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        if not bool(torch.isfinite(probs).all()) or float(probs.sum()) <= 0:
            return int(torch.argmax(logits).item())
        return int(torch.multinomial(probs.cpu(), 1, generator=self._generator).item())
