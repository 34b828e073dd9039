"""The sampler cannot be crashed by a parameter value (issue 14: request isolation in depth).

Before: temperature 1e-45 overflowed float32 logits to inf, top_p 1e-320 underflowed to 0 and
dropped every token, and a seed of 2**64 overflowed `manual_seed`, each raising inside the
batch step, which fails every request of the batch."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.engine.errors import BadRequestError
from prfaas.engine.sampling import SEED_MAX, SEED_MIN, Sampler, SamplingParams

VOCAB = 64


def _logits(seed: int = 0) -> torch.Tensor:
    return torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed)) * 20


@pytest.mark.parametrize(
    ("temperature", "top_p"),
    [(1e-45, 1.0), (1e-300, 1.0), (5e-324, 0.5), (1.0, 1e-320), (1.0, 5e-324), (2.0, 1e-45)],
)
def test_tiny_values_sample_the_greedy_token(temperature: float, top_p: float) -> None:
    logits = _logits()
    params = SamplingParams(temperature=temperature, top_p=top_p, seed=SEED_MAX)
    assert Sampler(params).sample(logits) == int(torch.argmax(logits))


@pytest.mark.parametrize(
    "fields",
    [
        {"seed": 2**64},
        {"seed": SEED_MAX + 1},
        {"seed": SEED_MIN - 1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_p": float("nan")},
        {"stop": ("",)},
    ],
)
def test_values_the_engine_cannot_honour_are_refused_at_submit(fields: dict) -> None:
    with pytest.raises(BadRequestError):
        SamplingParams(**fields)


@settings(max_examples=200, deadline=None)
@given(
    temperature=st.floats(min_value=0, max_value=2),
    top_p=st.floats(min_value=0, max_value=1, exclude_min=True),
    top_k=st.integers(min_value=0, max_value=2 * VOCAB),
    seed=st.integers(min_value=SEED_MIN, max_value=SEED_MAX),
    scale=st.sampled_from([1e-30, 1.0, 1e3, 1e30]),
)
def test_any_accepted_parameters_sample_a_token(
    temperature: float, top_p: float, top_k: int, seed: int, scale: float
) -> None:
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)
    token = Sampler(params).sample(_logits(seed % 1000) * scale)
    assert 0 <= token < VOCAB
