"""Fixtures of the planner tests: a linear-time fake profile and the paper's case study."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from prfaas.planner import PlanReport, load_scenario, plan
from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec


@dataclass(frozen=True)
class FakeProfile:
    """T_prefill = base + per_token * l; S_kv = bytes_per_token * l; decode step linear in batch."""

    model: ModelSpec
    chip: ChipSpec
    gpus_per_instance: int
    prefill_base_s: float
    prefill_per_token_s: float
    cache_bytes_per_token: float
    decode_base_s: float = 0.005
    decode_per_request_s: float = 0.001
    prefill_concurrency: int = 1  # prompts prefilled at once (attention-DP ranks)

    @property
    def source(self) -> str:
        return "fake"

    def prefill_s(self, length_tokens: int) -> float:
        return self.prefill_base_s + self.prefill_per_token_s * length_tokens

    def cache_bytes(self, length_tokens: int) -> float:
        return self.cache_bytes_per_token * length_tokens

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        return self.decode_base_s + self.decode_per_request_s * batch_size


FakeFactory = Callable[..., FakeProfile]


@pytest.fixture
def fake_profile() -> FakeFactory:
    def make(chip: str = "h20", **timing: float) -> FakeProfile:
        defaults = {
            "prefill_base_s": 0.5,
            "prefill_per_token_s": 1e-4,
            "cache_bytes_per_token": 20_000.0,
        }
        return FakeProfile(get_model("prfaas-1t"), get_chip(chip), 8, **(defaults | timing))

    return make


@pytest.fixture(scope="session")
def case_study() -> PlanReport:
    scenario = load_scenario("paper-case-study")
    return plan(scenario.hardware, scenario.workload, scenario.threshold_step_tokens)


@pytest.fixture
def shared_trace() -> Path:
    path = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
    path = path / "mooncake_conversation_trace.jsonl"
    if not path.exists():
        pytest.skip(f"shared trace not present at {path}")
    return path
