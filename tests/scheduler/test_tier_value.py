"""A hit's value by tier: what part of a hit on disk is worth its load (scheduler.tiers)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from scheduler_fixtures import SLOW

from prfaas.kvcache.ids import InstanceId
from prfaas.kvcache.index import IndexMatch
from prfaas.scheduler.tiers import HitPricing, valued_hit_tokens, weighed_hits

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


@given(
    input_tokens=st.integers(2, 50_000),
    data=st.data(),
    read_bytes_per_s=st.one_of(st.none(), st.floats(1.0, 1e13)),
)
def test_weighed_hits_lie_between_the_dram_part_and_the_hit(
    input_tokens: int, data: st.DataObject, read_bytes_per_s: float | None
) -> None:
    """`weighed_hits`, what the simulator's and the live router's hits come from: each hit is
    worth at least its DRAM part and at most itself, and all of it without a lower tier."""
    block = 16
    ids = [InstanceId(f"i{k}") for k in range(data.draw(st.integers(1, 4)))]
    blocks = {i: data.draw(st.integers(0, input_tokens // block)) for i in ids}
    lower = {i: data.draw(st.integers(0, n)) for i, n in blocks.items()}
    match = IndexMatch(blocks, {}, {i: n for i, n in lower.items() if n})
    asked: list[InstanceId] = []

    def pricing(instance_id: InstanceId) -> HitPricing:
        asked.append(instance_id)
        return HitPricing(SLOW, read_bytes_per_s)  # type: ignore[arg-type]

    hits = weighed_hits(match, block, input_tokens, pricing)
    assert set(hits) == {i for i, n in blocks.items() if n}
    for i, value in hits.items():
        hit = min(blocks[i] * block, input_tokens)
        assert max(0, hit - lower[i] * block) <= value <= hit
        if read_bytes_per_s is None or not lower[i]:
            assert value == hit
    assert set(asked) == {i for i in hits if lower[i]}
