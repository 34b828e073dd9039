"""Sampling parameters and the per-request sampler.

Greedy when `temperature == 0`; otherwise temperature, then top-k, then top-p (nucleus), drawn
from a `torch.Generator` seeded per request, so a request's tokens do not depend on what else
shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.errors import BadRequestError


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

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise BadRequestError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.top_k < 0:
            raise BadRequestError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")


class Sampler:
    """Picks the next token of one request from its last logits."""

    def __init__(self, params: SamplingParams) -> None:
        self._params = params
        self._generator = torch.Generator().manual_seed(params.seed)

    def sample(self, logits: torch.Tensor) -> int:
        p = self._params
        if p.temperature == 0:
            return int(torch.argmax(logits).item())
        scores = logits.float() / p.temperature
        if p.top_k:
            kth = torch.topk(scores, min(p.top_k, scores.numel())).values[-1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if p.top_p < 1:
            ordered, order = torch.sort(scores, descending=True)
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative - torch.softmax(ordered, dim=-1) >= p.top_p
            scores = scores.scatter(0, order[drop], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        return int(torch.multinomial(probs.cpu(), 1, generator=self._generator).item())
