"""ModelSpec arithmetic on configurations small enough to check by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    LinearKind,
    MlaAttention,
    ModelSpec,
    MoeMlp,
    SlidingWindowAttention,
)


def llama3_8b() -> ModelSpec:
    """Llama-3-8B: 32 layers, GQA 32/8 heads of 128, SwiGLU 14336, vocab 128256, untied."""
    return ModelSpec(
        name="llama3-8b",
        hidden_size=4096,
        vocab_size=128256,
        mixers=(GqaAttention(num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128),),
        mlps=(DenseMlp(num_layers=32, intermediate_size=14336),),
    )


def test_dense_gqa_cache_is_linear_in_length_with_no_state() -> None:
    spec = llama3_8b()
    # 32 layers * (K and V) * 8 heads * 128 dims * 2 bytes
    assert spec.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2 == 131_072
    assert spec.cache_bytes(1000) == 131_072_000
    assert spec.state_bytes(1000) == 0


def test_dense_gqa_parameters_match_the_published_count() -> None:
    spec = llama3_8b()
    attention = 4096 * (32 * 128 + 2 * 8 * 128 + 32 * 128)
    mlp = 3 * 4096 * 14336
    embeddings = 2 * 128256 * 4096
    assert spec.total_params == 32 * (attention + mlp) + embeddings
    # Meta publishes 8,030,261,248 including 266,240 RMSNorm weights, which we do not count.
    assert spec.total_params == 8_030_261_248 - 266_240
    assert spec.active_params == spec.total_params


def test_dense_gqa_prefill_flops_by_hand() -> None:
    spec = llama3_8b()
    layer_params = spec.total_params - 2 * 128256 * 4096
    length = 4
    matmuls = 2 * length * layer_params + 2 * 4096 * 128256
    # causal pairs 1+2+3+4 = 10; per pair 2 FLOPs * (128 + 128) per query head, 32 heads, 32 layers
    attention = 2 * 10 * 32 * 256 * 32
    assert spec.matmul_flops(length) == matmuls
    assert spec.mixing_flops(length) == attention
    assert spec.prefill_flops(length) == matmuls + attention


def deepseek_like_mla() -> ModelSpec:
    return ModelSpec(
        name="mla",
        hidden_size=7168,
        vocab_size=129280,
        mixers=(
            MlaAttention(
                num_layers=61,
                num_q_heads=128,
                kv_lora_rank=512,
                qk_rope_head_dim=64,
                qk_nope_head_dim=128,
                v_head_dim=128,
                q_lora_rank=1536,
            ),
        ),
        mlps=(
            DenseMlp(num_layers=3, intermediate_size=18432),
            MoeMlp(
                num_layers=58,
                num_experts=256,
                experts_per_token=8,
                expert_intermediate_size=2048,
                num_shared_experts=1,
                shared_intermediate_size=2048,
            ),
        ),
    )


def test_mla_caches_one_latent_and_one_rope_key_per_layer() -> None:
    spec = deepseek_like_mla()
    assert spec.kv_bytes_per_token() == 61 * (512 + 64) * 2 == 70_272
    assert spec.cache_bytes(1024) == 1024 * 70_272
    assert spec.state_bytes(1024) == 0


def test_mla_parameter_count_is_deepseek_v3s() -> None:
    spec = deepseek_like_mla()
    assert spec.total_params / 1e9 == pytest.approx(671.0, rel=0.005)
    assert spec.active_params / 1e9 == pytest.approx(37.5, rel=0.01)


def test_mla_prefill_uses_decompressed_head_dims() -> None:
    spec = deepseek_like_mla()
    # 3 causal pairs for 2 tokens; (192 qk + 128 v) per head; 128 heads; 61 layers
    assert spec.mixing_flops(2) == 2 * 3 * 128 * 320 * 61


def three_to_one_hybrid() -> ModelSpec:
    """4 layers: 3 Gated DeltaNet (2 value heads, 1 key head, dk 4, dv 8, conv 4) + 1 GQA."""
    return ModelSpec(
        name="hybrid",
        hidden_size=64,
        vocab_size=100,
        mixers=(
            LinearAttention(
                num_layers=3,
                kind=LinearKind.GATED_DELTANET,
                num_heads=2,
                num_key_heads=1,
                key_head_dim=4,
                value_head_dim=8,
                conv_kernel=4,
            ),
            GqaAttention(num_layers=1, num_q_heads=4, num_kv_heads=2, head_dim=16),
        ),
        mlps=(DenseMlp(num_layers=4, intermediate_size=128),),
    )


def test_hybrid_state_is_fixed_and_only_attention_grows() -> None:
    spec = three_to_one_hybrid()
    recurrent = 3 * (2 * 4 * 8) * 4  # fp32 states
    conv = 3 * (2 * 1 * 4 + 2 * 8) * (4 - 1) * 2  # q,k,v channels, kernel-1 inputs, bf16
    assert spec.state_bytes(1) == spec.state_bytes(10_000) == recurrent + conv == 1200
    assert spec.kv_bytes_per_token() == 1 * 2 * 2 * 16 * 2 == 128
    assert spec.cache_bytes(10) == 1280 + 1200


def test_hybrid_linear_layers_add_linear_flops() -> None:
    spec = three_to_one_hybrid()
    linear = spec.mixers[0]
    assert linear.mixing_flops(20) == 2 * linear.mixing_flops(10)


def test_sliding_window_state_is_capped_at_the_window() -> None:
    swa = SlidingWindowAttention(
        num_layers=2, window_tokens=128, num_q_heads=4, num_kv_heads=2, head_dim=8
    )
    per_token = 2 * 2 * (8 + 8) * 2
    assert swa.state_bytes(100) == 100 * per_token
    assert swa.state_bytes(10_000) == 128 * per_token
    assert swa.kv_bytes_per_token() == 0


@given(length=st.integers(1, 600), window=st.integers(1, 300))
def test_windowed_attention_counts_min_i_w_keys_per_query(length: int, window: int) -> None:
    swa = SlidingWindowAttention(
        num_layers=1, window_tokens=window, num_q_heads=1, num_kv_heads=1, head_dim=1
    )
    pairs = sum(min(i, window) for i in range(1, length + 1))
    assert swa.mixing_flops(length) == 2 * pairs * 2


@given(length=st.integers(0, 1_000_000))
def test_cache_is_kv_plus_state(length: int) -> None:
    spec = three_to_one_hybrid()
    assert spec.cache_bytes(length) == spec.kv_bytes(length) + spec.state_bytes(length)


def test_mixer_and_mlp_layer_counts_must_agree() -> None:
    with pytest.raises(ValueError, match="3 mixer layers but 4 MLP layers"):
        ModelSpec(
            name="bad",
            hidden_size=8,
            vocab_size=8,
            mixers=(GqaAttention(num_layers=3, num_q_heads=1, num_kv_heads=1, head_dim=8),),
            mlps=(DenseMlp(num_layers=4, intermediate_size=8),),
        )
