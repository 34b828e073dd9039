"""Presets, the byte tokenizer, checkpoint errors and the cache layout derived from a model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_helpers import PRESET_NAMES, preset

from prfaas.engine import ModelLoadError, build_preset, load_model
from prfaas.engine.cache_layout import LayerKind, derive_cache_layout
from prfaas.engine.tokenizer import BOS_ID, ByteTokenizer


def test_a_preset_is_the_same_model_every_time() -> None:
    first, second = build_preset("tiny-llama"), build_preset("tiny-llama")
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)
    other = build_preset("tiny-llama", seed=1)
    assert not torch.equal(next(other.model.parameters()), next(first.model.parameters()))


def test_the_byte_tokenizer_round_trips_text_and_drops_specials() -> None:
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode_prompt("héllo", chat=False)
    assert ids[0] == BOS_ID and ids[1:] == list("héllo".encode())
    assert tokenizer.decode(ids) == "héllo"


def test_bad_model_names_and_paths_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown model 'tiny-gpt'"):
        load_model("tiny-gpt")
    with pytest.raises(ModelLoadError, match="no such checkpoint"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        load_model(str(tmp_path))


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("tiny-qwen3-next", {"gqa": LayerKind.FULL, "gated_deltanet": LayerKind.LINEAR}),
        ("tiny-kimi-linear", {"mla": LayerKind.FULL, "kda": LayerKind.LINEAR}),
        ("tiny-swa", {"gqa": LayerKind.FULL, "swa": LayerKind.SLIDING}),
        ("tiny-llama", {"gqa": LayerKind.FULL}),
    ],
)
def test_pool_groups_come_from_the_model_and_match_its_cache_bytes(
    name: str, kinds: dict[str, LayerKind]
) -> None:
    layout = derive_cache_layout(preset(name).model, name, 16)
    assert {c.group.name: c.kind for c in layout.groups} == kinds
    for codec in layout.groups:
        assert codec.unit_bytes == codec.group.unit_bytes  # checked byte for byte
    layers = sorted(s.layer_index for c in layout.groups for s in c.slots)
    assert layers == list(range(layout.num_layers))


def test_qwen3_next_units_are_the_hand_computed_sizes() -> None:
    layout = derive_cache_layout(preset("tiny-qwen3-next").model, "q", 16)
    sizes = {c.group.name: c.unit_bytes for c in layout.groups}
    # GQA: 2 layers x (2 heads x 16 x 16 tokens, keys and values) x 4 B; GDN: 2 x (128 x 3 +
    # 4 x 16 x 16) x 4 B
    assert sizes == {"gqa": 2 * 2 * 2 * 16 * 16 * 4, "gated_deltanet": 2 * (128 * 3 + 1024) * 4}


def test_every_preset_is_listed() -> None:
    assert PRESET_NAMES == [
        "tiny-bamba",
        "tiny-falcon-h1",
        "tiny-gemma3",
        "tiny-granite-hybrid",
        "tiny-jamba",
        "tiny-kimi-linear",
        "tiny-lfm2",
        "tiny-llama",
        "tiny-mamba2",
        "tiny-minimax",
        "tiny-nemotron-h",
        "tiny-olmo-hybrid",
        "tiny-qwen3-next",
        "tiny-swa",
        "tiny-zamba",
        "tiny-zamba2",
    ]
