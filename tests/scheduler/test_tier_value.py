"""A hit's value by tier: what part of a hit on disk is worth its load (scheduler.tiers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from scheduler_fixtures import SLOW

from prfaas.scheduler.tiers import valued_hit_tokens

PER_TOKEN_S = SLOW.prefill_per_token_s  # 40 us a token


def test_a_load_cheaper_than_recompute_keeps_the_time_it_saves() -> None:
    # 10K of 20K input tokens hit, 4K of them on disk: recomputing those costs 0.16 s, a
    # 0.04 s load leaves 0.12 s saved: worth 3K tokens of the 4K.
    assert valued_hit_tokens(SLOW, 20_000, 10_000, 4_000, 0.04) == 9_000  # type: ignore[arg-type]
    assert valued_hit_tokens(SLOW, 20_000, 10_000, 4_000, 0.0) == 10_000  # type: ignore[arg-type]


def test_a_load_dearer_than_recompute_leaves_the_dram_part() -> None:
    assert valued_hit_tokens(SLOW, 20_000, 10_000, 4_000, 0.5) == 6_000  # type: ignore[arg-type]


@given(
    input_tokens=st.integers(2, 100_000),
    data=st.data(),
    load_s=st.floats(0, 10),
    more_s=st.floats(0, 10),
)
def test_the_value_lies_between_the_dram_part_and_the_hit_and_falls_with_the_load(
    input_tokens: int, data: st.DataObject, load_s: float, more_s: float
) -> None:
    hit = data.draw(st.integers(0, input_tokens - 1))
    lower = data.draw(st.integers(0, hit))
    value = valued_hit_tokens(SLOW, input_tokens, hit, lower, load_s)  # type: ignore[arg-type]
    assert hit - lower <= value <= hit
    slower = valued_hit_tokens(SLOW, input_tokens, hit, lower, load_s + more_s)  # type: ignore[arg-type]
    assert slower <= value
    if lower == 0:
        assert value == hit
