"""Reading Hugging Face config.json files: every supported family, and clear refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from prfaas.specs.catalog import catalog_model, get_model
from prfaas.specs.errors import SpecFileError, UnsupportedConfigError
from prfaas.specs.hf_config import load_hf_config, model_from_hf_config
from prfaas.specs.model import (
    GqaAttention,
    LinearAttention,
    LinearKind,
    MlaAttention,
    SlidingWindowAttention,
)

CATALOG_FIXTURES = [
    "kimi-linear-48b",
    "mimo-v2-flash",
    "qwen3.5-397b",
    "ring-2.5-1t",
    "minimax-m2.5",
    "qwen3-235b",
]


def _load(hf_config_dir: Path, name: str) -> dict:
    return json.loads((hf_config_dir / f"{name}.json").read_text())


@pytest.mark.parametrize("name", CATALOG_FIXTURES)
def test_config_json_reads_to_the_catalog_entry(hf_config_dir: Path, name: str) -> None:
    """Our YAML catalog and the HF reader are two routes to one architecture."""
    from_hf = model_from_hf_config(_load(hf_config_dir, name), name)
    assert dataclasses.replace(from_hf, weight_dtype_bytes=1) == dataclasses.replace(
        get_model(name), weight_dtype_bytes=1
    )


@pytest.mark.parametrize("name", CATALOG_FIXTURES)
def test_catalog_parameter_counts_match_the_model_cards(name: str) -> None:
    entry = catalog_model(name)
    assert entry.card_total_params is not None and entry.card_active_params is not None
    assert entry.spec.total_params == pytest.approx(entry.card_total_params, rel=0.03)
    # Cards round active counts to whole billions, some with embeddings and some without.
    without_embeddings = entry.spec.active_params - entry.spec.embedding_params()
    assert 0.9 * without_embeddings <= entry.card_active_params <= 1.1 * entry.spec.active_params


def test_qwen3_next_hybrid_layout(hf_config_dir: Path) -> None:
    spec = model_from_hf_config(_load(hf_config_dir, "qwen3-next-80b"), "qwen3-next")
    full, linear = spec.mixers
    assert isinstance(full, GqaAttention) and full.gated and full.num_layers == 12
    assert isinstance(linear, LinearAttention) and linear.num_layers == 36
    assert linear.kind is LinearKind.GATED_DELTANET
    assert (linear.num_heads, linear.num_key_heads, linear.conv_kernel) == (32, 16, 4)
    assert spec.total_params / 1e9 == pytest.approx(80, rel=0.01)


def test_gpt_oss_alternates_sliding_and_full(hf_config_dir: Path) -> None:
    spec = model_from_hf_config(_load(hf_config_dir, "gpt-oss-120b"), "gpt-oss")
    full, sliding = spec.mixers
    assert isinstance(full, GqaAttention) and full.num_layers == 18
    assert isinstance(sliding, SlidingWindowAttention) and sliding.num_layers == 18
    assert sliding.window_tokens == 128
    assert spec.total_params / 1e9 == pytest.approx(117, rel=0.01)


DENSE_BASE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
}


def _window_layers(raw: dict) -> list[tuple[str, int, int | None]]:
    spec = model_from_hf_config({**DENSE_BASE, **raw}, "m")
    return [
        (type(g).__name__, g.num_layers, getattr(g, "window_tokens", None)) for g in spec.mixers
    ]


def test_a_dense_models_window_applies_as_transformers_and_vllm_apply_it() -> None:
    """Mistral-7B-v0.1 slides every layer; Qwen2.5 ships a window it does not use."""
    assert _window_layers({"model_type": "llama"}) == [("GqaAttention", 4, None)]
    assert _window_layers({"model_type": "mistral", "sliding_window": 4096}) == [
        ("SlidingWindowAttention", 4, 4096)
    ]
    assert _window_layers({"model_type": "mistral", "sliding_window": None}) == [
        ("GqaAttention", 4, None)
    ]
    qwen = {"model_type": "qwen2", "sliding_window": 131072, "max_window_layers": 2}
    assert _window_layers(qwen | {"use_sliding_window": False}) == [("GqaAttention", 4, None)]
    assert _window_layers(qwen) == [("GqaAttention", 4, None)]  # transformers' default: off
    assert _window_layers(qwen | {"use_sliding_window": True}) == [
        ("GqaAttention", 2, None),
        ("SlidingWindowAttention", 2, 131072),
    ]
    listed = ["full_attention", "sliding_attention"] * 2
    assert _window_layers({"model_type": "qwen3", "sliding_window": 64, "layer_types": listed}) == [
        ("GqaAttention", 2, None),
        ("SlidingWindowAttention", 2, 64),
    ]


def test_deepseek_v3_is_all_mla_with_dense_first_layers(hf_config_dir: Path) -> None:
    spec = model_from_hf_config(_load(hf_config_dir, "deepseek-v3"), "dsv3")
    (mla,) = spec.mixers
    assert isinstance(mla, MlaAttention) and mla.num_layers == 61 and mla.q_lora_rank == 1536
    assert [m.num_layers for m in spec.mlps] == [3, 58]
    assert spec.weight_dtype_bytes == 1  # fp8 quantization_config
    assert spec.total_params / 1e9 == pytest.approx(671, rel=0.005)


def test_qwen3_5_reads_its_text_config(hf_config_dir: Path) -> None:
    raw = _load(hf_config_dir, "qwen3.5-397b")
    assert raw["model_type"] == "qwen3_5_moe"
    spec = model_from_hf_config(raw, "q35")
    assert spec.num_layers == 60 and spec.vocab_size == 248320


def test_kimi_linear_layer_lists_are_one_based(hf_config_dir: Path) -> None:
    raw = _load(hf_config_dir, "kimi-linear-48b")
    raw["linear_attn_config"]["full_attn_layers"] = [1]
    spec = model_from_hf_config(raw, "kimi")
    assert [g.num_layers for g in spec.mixers] == [1, 26]


def test_unsupported_family_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedConfigError, match="unsupported model_type 'rwkv7'"):
        model_from_hf_config({"model_type": "rwkv7", "hidden_size": 8}, "x")


def test_missing_field_is_named(hf_config_dir: Path) -> None:
    raw = _load(hf_config_dir, "qwen3-235b")
    del raw["num_key_value_heads"]
    del raw["num_attention_heads"]
    with pytest.raises(UnsupportedConfigError, match="lacks 'num_attention_heads'"):
        model_from_hf_config(raw, "x")


def test_load_from_checkpoint_directory(tmp_path: Path, hf_config_dir: Path) -> None:
    checkpoint = tmp_path / "my-model"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text((hf_config_dir / "qwen3-235b.json").read_text())
    spec = load_hf_config(checkpoint)
    assert spec.name == "my-model" and spec.num_layers == 94


def test_broken_json_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(SpecFileError, match="not valid JSON"):
        load_hf_config(path)
