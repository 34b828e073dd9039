"""The page alignment rule: exact layouts of catalog models and its padding bound."""

from __future__ import annotations

import pytest
from kvcache_fixtures import DENSE, HYBRID, TRIPLE

from prfaas.kvcache import CacheConfigError, GroupKind, PageLayout
from prfaas.specs.catalog import get_model, model_names


def test_kimi_linear_at_512_tokens_keeps_one_page_per_block_and_11_per_state() -> None:
    layout = PageLayout.from_model(get_model("kimi-linear-48b"), 512)
    mla, kda = layout.groups
    assert (layout.page_bytes, layout.pages_per_block, layout.page_tokens) == (4_128_768, 1, 512)
    assert (mla.name, mla.kind, mla.unit_bytes, mla.pages_per_unit) == (
        "mla",
        GroupKind.ATTENTION,
        4_128_768,
        1,
    )
    assert (kda.name, kda.kind, kda.unit_bytes, kda.pages_per_unit) == (
        "kda",
        GroupKind.STATE,
        43_417_600,
        11,
    )
    assert kda.padding_bytes == 1_998_848
    assert kda.padding_fraction == pytest.approx(0.044, abs=0.001)


def test_mimo_splits_its_block_in_four_pages_rather_than_waste_28_percent() -> None:
    layout = PageLayout.from_model(get_model("mimo-v2-flash"), 512)
    gqa, swa = layout.groups
    assert (layout.pages_per_block, layout.page_bytes, layout.page_tokens) == (4, 2_949_120, 128)
    assert (gqa.pages_per_unit, swa.pages_per_unit) == (4, 9)
    assert swa.unit_bytes == 128 * 199_680
    assert swa.padding_fraction == pytest.approx(0.037, abs=0.001)


def test_a_dense_model_has_one_group_and_no_padding() -> None:
    layout = PageLayout.from_model(get_model("qwen3-235b"), 512)
    assert len(layout.groups) == 1
    assert layout.state_groups == ()
    assert layout.groups[0].padding_bytes == 0
    assert layout.page_bytes == 512 * 192_512


@pytest.mark.parametrize("name", model_names())
@pytest.mark.parametrize("block_tokens", [16, 64, 512])
def test_every_catalog_model_pads_at_most_five_percent(name: str, block_tokens: int) -> None:
    layout = PageLayout.from_model(get_model(name), block_tokens)
    assert layout.block_tokens == block_tokens  # the hash block is never inflated
    assert layout.max_padding_fraction() <= 0.05
    for group in layout.groups:
        assert 0 <= group.padding_bytes < layout.page_bytes
        assert layout.page_bytes % 256 == 0


def test_tiny_models_have_the_pages_the_fixtures_promise() -> None:
    assert [g.pages_per_unit for g in PageLayout.from_model(DENSE, 4).groups] == [1]
    assert [g.pages_per_unit for g in PageLayout.from_model(HYBRID, 4).groups] == [1, 2]
    triple = PageLayout.from_model(TRIPLE, 4)
    assert triple.page_bytes == 512
    assert [(g.name, g.pages_per_unit) for g in triple.groups] == [
        ("gqa", 1),
        ("gated_deltanet", 2),
        ("swa", 2),
    ]
    assert triple.group_kinds == (GroupKind.ATTENTION, GroupKind.STATE, GroupKind.STATE)


def test_when_no_split_meets_the_bound_the_least_padded_one_wins() -> None:
    layout = PageLayout.from_model(get_model("mimo-v2-flash"), 1, max_padding_fraction=0.0)
    assert layout.pages_per_block == 1  # 1-token blocks cannot be split
    assert layout.max_padding_fraction() > 0.0


def test_block_tokens_must_be_positive() -> None:
    with pytest.raises(CacheConfigError):
        PageLayout.from_model(HYBRID, 0)
