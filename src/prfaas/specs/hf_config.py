"""Read a Hugging Face `config.json` into a ModelSpec, for the families PrfaaS cares about.

Each family reader turns the config into a per-layer plan (mixer kind and MLP kind of every
layer), and one builder counts the plan into layer groups. Field names and defaults follow
transformers 5.24's configuration classes, so a config that transformers loads reads the same
here. Vision towers of multimodal configs are ignored: they do not touch the KV cache.

Supported `model_type`s: see `SUPPORTED_MODEL_TYPES`. Anything else raises
`UnsupportedConfigError` naming the type, rather than guessing.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prfaas.specs.errors import SpecFileError, UnsupportedConfigError
from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    LinearKind,
    MixerGroup,
    MlaAttention,
    MlpGroup,
    ModelSpec,
    MoeMlp,
    SlidingWindowAttention,
)

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1}


class _Config:
    """A config dict with errors that say which field was missing or wrong."""

    def __init__(self, raw: Mapping[str, Any], model_type: str) -> None:
        self.raw = raw
        self.model_type = model_type

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.raw.get(key)
        return default if value is None else value

    def int(self, key: str, default: int | None = None) -> int:
        value = self.raw.get(key)
        if value is None:
            value = default
        if value is None:
            raise UnsupportedConfigError(f"{self.model_type} config lacks {key!r}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise UnsupportedConfigError(f"{self.model_type} config: {key} must be an integer")
        return value


@dataclass(frozen=True, slots=True)
class _LayerPlan:
    """Kinds of the model's mixers ('full', 'sliding', 'linear', ...) and MLPs ('dense',
    'moe'), one per layer; `num_blocks` is the layer count when layers do not pair one mixer
    with one MLP (see `ModelSpec.num_blocks`)."""

    mixers: list[str]
    mlps: list[str]
    num_blocks: int = 0


def _weight_dtype_bytes(cfg: _Config) -> int:
    quant = cfg.get("quantization_config", {})
    if quant.get("quant_method") == "fp8" or "float8" in str(quant.get("fmt", "")):
        return 1
    dtype = cfg.get("torch_dtype", cfg.get("dtype", "bfloat16"))
    return _DTYPE_BYTES.get(str(dtype), 2)


def _normalise_layer_types(cfg: _Config, fallback: Callable[[int], str]) -> list[str]:
    n = cfg.int("num_hidden_layers")
    names = cfg.get("layer_types") or [fallback(i) for i in range(n)]
    if len(names) != n:
        raise UnsupportedConfigError(
            f"{cfg.model_type} config: layer_types has {len(names)} != {n}"
        )
    kinds = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
    try:
        return [kinds[name] for name in names]
    except KeyError as err:
        raise UnsupportedConfigError(f"{cfg.model_type} config: unknown layer type {err}") from None


def _first_k_dense(cfg: _Config, default_k: int) -> list[str]:
    k = cfg.int("first_k_dense_replace", default_k)
    freq = cfg.int("moe_layer_freq", 1) or 1
    n = cfg.int("num_hidden_layers")
    return ["dense" if i < k or (i - k) % freq else "moe" for i in range(n)]


def _sparse_step(cfg: _Config) -> list[str]:
    """Qwen MoE layout: `decoder_sparse_step` and `mlp_only_layers`."""
    n, step = cfg.int("num_hidden_layers"), cfg.int("decoder_sparse_step", 1) or 1
    dense_only = set(cfg.get("mlp_only_layers", []))
    if cfg.int("num_experts", 0) == 0:
        return ["dense"] * n
    return ["moe" if i not in dense_only and (i + 1) % step == 0 else "dense" for i in range(n)]


# --- family readers: config -> (layer plan, mixer factory, mlp factory) -------------------


def _gqa(cfg: _Config, count: int, *, gated: bool = False) -> GqaAttention:
    heads = cfg.int("num_attention_heads")
    head_dim = cfg.int("head_dim", cfg.int("hidden_size") // heads)
    return GqaAttention(
        num_layers=count,
        num_q_heads=heads,
        num_kv_heads=cfg.int("num_key_value_heads", heads),
        head_dim=head_dim,
        v_head_dim=cfg.get("v_head_dim"),
        gated=gated,
    )


def _mla(cfg: _Config, count: int) -> MlaAttention:
    return MlaAttention(
        num_layers=count,
        num_q_heads=cfg.int("num_attention_heads"),
        kv_lora_rank=cfg.int("kv_lora_rank"),
        qk_rope_head_dim=cfg.int("qk_rope_head_dim"),
        qk_nope_head_dim=cfg.int("qk_nope_head_dim"),
        v_head_dim=cfg.int("v_head_dim"),
        q_lora_rank=cfg.int("q_lora_rank", 0),
    )


def _gated_deltanet(cfg: _Config, count: int) -> LinearAttention:
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.GATED_DELTANET,
        num_heads=cfg.int("linear_num_value_heads"),
        num_key_heads=cfg.int("linear_num_key_heads"),
        key_head_dim=cfg.int("linear_key_head_dim"),
        value_head_dim=cfg.int("linear_value_head_dim"),
        conv_kernel=cfg.int("linear_conv_kernel_dim", 4),
    )


def _kda(count: int, heads: int, head_dim: int, kernel: int) -> LinearAttention:
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.KDA,
        num_heads=heads,
        num_key_heads=heads,
        key_head_dim=head_dim,
        value_head_dim=head_dim,
        conv_kernel=kernel,
    )


def _moe(
    cfg: _Config, count: int, experts_key: str, per_token_key: str, expert_size_key: str
) -> MoeMlp:
    """Qwen names one shared expert by its size; DeepSeek-style configs count shared experts of
    the routed size (Bailing may give their size separately)."""
    expert_size = cfg.int(expert_size_key)
    shared_size = cfg.int("shared_expert_intermediate_size", 0)
    if shared_size:
        num_shared = 1
    else:
        num_shared = cfg.int("n_shared_experts", cfg.int("num_shared_experts", 0))
        shared_size = (
            cfg.int("moe_shared_expert_intermediate_size", expert_size) if num_shared else 0
        )
    return MoeMlp(
        num_layers=count,
        num_experts=cfg.int(experts_key),
        experts_per_token=cfg.int(per_token_key),
        expert_intermediate_size=expert_size,
        num_shared_experts=num_shared,
        shared_intermediate_size=shared_size,
    )


@dataclass(frozen=True, slots=True)
class _Family:
    plan: Callable[[_Config], _LayerPlan]
    mixer: Callable[[_Config, str, int], MixerGroup]
    mlp: Callable[[_Config, str, int], MlpGroup]


def _dense_plan(cfg: _Config) -> _LayerPlan:
    """Full attention, unless the config gives a window, which applies as transformers and
    vLLM apply it: to the `layer_types` listed as sliding; without them, for Qwen from
    `max_window_layers` on and only when `use_sliding_window` says so (Qwen2.5 ships a
    window beside `use_sliding_window: false`), else to every layer (Mistral-7B-v0.1)."""
    qwen = cfg.model_type.startswith("qwen")
    window = cfg.int("sliding_window", 0) if cfg.get("use_sliding_window", not qwen) else 0
    first = cfg.int("max_window_layers", 0) if cfg.has("use_sliding_window") else 0
    mixers = _normalise_layer_types(
        cfg, lambda i: "sliding_attention" if window and i >= first else "full_attention"
    )
    return _LayerPlan(mixers, ["dense"] * len(mixers))


def _dense_mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
    return DenseMlp(count, cfg.int("intermediate_size"))


def _dense_or_moe(
    experts_key: str, per_token_key: str, expert_size_key: str
) -> Callable[[_Config, str, int], MlpGroup]:
    """An MLP reader for families whose MoE fields differ only by name."""

    def mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
        if kind == "dense":
            return _dense_mlp(cfg, kind, count)
        return _moe(cfg, count, experts_key, per_token_key, expert_size_key)

    return mlp


_qwen_mlp = _dense_or_moe("num_experts", "num_experts_per_tok", "moe_intermediate_size")
_mimo_mlp = _dense_or_moe("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")
_nemotron_h_mlp = _mimo_mlp
_jamba_mlp = _dense_or_moe("num_experts", "num_experts_per_tok", "intermediate_size")


def _qwen_hybrid_plan(cfg: _Config) -> _LayerPlan:
    interval = cfg.int("full_attention_interval", 4)
    mixers = _normalise_layer_types(
        cfg, lambda i: "full_attention" if (i + 1) % interval == 0 else "linear_attention"
    )
    return _LayerPlan(mixers, _sparse_step(cfg))


def _qwen_hybrid_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    return _gqa(cfg, count, gated=True) if kind == "full" else _gated_deltanet(cfg, count)


def _kimi_linear_plan(cfg: _Config) -> _LayerPlan:
    """Two config formats: the Hub checkpoint's `linear_attn_config` (1-based
    `full_attn_layers`, `first_k_dense_replace`) and transformers' own `KimiLinearConfig`
    (`layer_types`, `mlp_layer_types` of dense / sparse; when absent, every 4th layer after the
    first is full attention and only the first MLP is dense, as transformers defaults)."""
    n = cfg.int("num_hidden_layers")
    hub_full = cfg.get("linear_attn_config", {}).get("full_attn_layers")
    if hub_full:
        full = {i - 1 for i in hub_full}  # 1-based in the checkpoint
        mixers = ["full" if i in full else "linear" for i in range(n)]
    else:
        mixers = _normalise_layer_types(cfg, _kimi_default_layer)
    mlp_types = cfg.get("mlp_layer_types")
    if mlp_types is None:
        return _LayerPlan(mixers, _first_k_dense(cfg, 1))
    if len(mlp_types) != n or set(mlp_types) - {"dense", "sparse"}:
        raise UnsupportedConfigError(
            "kimi_linear config: mlp_layer_types must name dense or sparse for every layer"
        )
    return _LayerPlan(mixers, ["dense" if t == "dense" else "moe" for t in mlp_types])


def _kimi_default_layer(i: int) -> str:
    """transformers' KimiLinearConfig default: full attention at layers 4, 8, ... (0-based)."""
    return "full_attention" if i and i % 4 == 0 else "linear_attention"


def _kimi_linear_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    if kind == "full":
        return _mla(cfg, count)
    hub = cfg.get("linear_attn_config")
    if hub:  # the Hub checkpoint's sub-dict
        lin = _Config(hub, "kimi_linear linear_attn_config")
        heads, head_dim = lin.int("num_heads"), lin.int("head_dim")
        kernel = lin.int("short_conv_kernel_size", 4)
    else:  # transformers' KimiLinearConfig fields, with its defaults
        heads, head_dim = cfg.int("linear_num_heads", 32), cfg.int("linear_head_dim", 128)
        kernel = cfg.int("linear_conv_kernel_dim", 4)
    return _kda(count, heads, head_dim, kernel)


def _deepseek_mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
    if kind == "dense":
        return _dense_mlp(cfg, kind, count)
    experts = "n_routed_experts" if cfg.has("n_routed_experts") else "num_experts"
    per_token = "num_experts_per_tok" if cfg.has("num_experts_per_tok") else "num_experts_per_token"
    return _moe(cfg, count, experts, per_token, "moe_intermediate_size")


def _deepseek_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")
    return _LayerPlan(["full"] * n, _first_k_dense(cfg, 0))


def _gpt_oss_plan(cfg: _Config) -> _LayerPlan:
    mixers = _normalise_layer_types(
        cfg, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention"
    )
    return _LayerPlan(mixers, ["moe"] * len(mixers))


def _swa_or_gqa(cfg: _Config, kind: str, count: int) -> MixerGroup:
    full = _gqa(cfg, count)
    if kind == "full":
        return full
    return SlidingWindowAttention(
        num_layers=count,
        window_tokens=cfg.int("sliding_window"),
        num_q_heads=full.num_q_heads,
        num_kv_heads=full.num_kv_heads,
        head_dim=full.head_dim,
        v_head_dim=full.v_head_dim,
    )


def _local_experts_mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
    """gpt-oss and MiniMax: `num_local_experts` of `intermediate_size`, no shared expert."""
    return _moe(cfg, count, "num_local_experts", "num_experts_per_tok", "intermediate_size")


def _minimax_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")
    return _LayerPlan(["full"] * n, ["moe"] * n)


def _mimo_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")
    if cfg.has("hybrid_layer_pattern"):  # checkpoint form: 1 = sliding window
        pattern = cfg.get("hybrid_layer_pattern")
        names = ["sliding_attention" if flag else "full_attention" for flag in pattern]
        cfg = _Config({**cfg.raw, "layer_types": names}, cfg.model_type)
    mixers = _normalise_layer_types(
        cfg, lambda i: "full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"
    )
    if cfg.has("moe_layer_freq") and isinstance(cfg.get("moe_layer_freq"), list):
        mlps = ["moe" if flag else "dense" for flag in cfg.get("moe_layer_freq")]
    else:
        mlps = ["dense"] + ["moe"] * (n - 1)
    return _LayerPlan(mixers, mlps)


def _mimo_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    if kind == "full":
        return _gqa(cfg, count)
    heads = cfg.int("swa_num_attention_heads", cfg.int("num_attention_heads"))
    window = cfg.int("sliding_window_size", cfg.int("sliding_window", 128))
    return SlidingWindowAttention(
        num_layers=count,
        window_tokens=window,
        num_q_heads=heads,
        num_kv_heads=cfg.int("swa_num_key_value_heads", cfg.int("num_key_value_heads")),
        head_dim=cfg.int("swa_head_dim", cfg.int("head_dim")),
        v_head_dim=cfg.int("swa_v_head_dim", cfg.int("v_head_dim", cfg.int("head_dim"))),
    )


def _bailing_plan(cfg: _Config) -> _LayerPlan:
    group = cfg.int("layer_group_size", 6)
    mixers = _normalise_layer_types(
        cfg, lambda i: "full_attention" if (i + 1) % group == 0 else "linear_attention"
    )
    return _LayerPlan(mixers, _first_k_dense(cfg, 2))


def _bailing_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    """Ring-2.5 (BailingMoeV2_5) uses Lightning attention without a short conv; transformers'
    generic bailing_hybrid uses KDA with one."""
    if kind == "full":
        return _mla(cfg, count)
    heads = cfg.int("num_kv_heads_for_linear_attn", cfg.int("num_attention_heads"))
    head_dim = cfg.int("head_dim", 128)
    if "BailingMoeV2_5ForCausalLM" in cfg.get("architectures", []):
        return LinearAttention(
            num_layers=count,
            kind=LinearKind.LIGHTNING,
            num_heads=heads,
            num_key_heads=heads,
            key_head_dim=head_dim,
            value_head_dim=head_dim,
        )
    return _kda(count, heads, head_dim, cfg.int("short_conv_kernel_size", 4))


def _bailing_mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
    if kind == "dense":
        return _dense_mlp(cfg, kind, count)
    experts = "num_experts" if cfg.has("num_experts") else "num_local_experts"
    per_token = "num_experts_per_tok" if cfg.has("num_experts_per_tok") else "num_experts_per_token"
    return _moe(cfg, count, experts, per_token, "moe_intermediate_size")


# --- SSM and hybrid-SSM families ----------------------------------------------------------


def _mamba2(cfg: _Config, count: int) -> LinearAttention:
    """Mamba2 state per layer: SSM (heads, head_dim, d_state) and a conv over x, B and C
    (intermediate + 2 * groups * d_state channels), as LinearAttention with key dim = d_state
    and key heads = groups. Field names differ per family: `names` maps ours to theirs."""
    names = _MAMBA2_FIELDS[cfg.model_type]
    hidden = cfg.int("hidden_size")
    heads = cfg.int(names["heads"])
    expand = cfg.int(names["expand"], 2)
    intermediate = expand * hidden
    if names["intermediate"]:
        intermediate = cfg.int(names["intermediate"], intermediate)
    head_dim_raw = cfg.get(names["head_dim"], "auto")
    head_dim = intermediate // heads if head_dim_raw == "auto" else cfg.int(names["head_dim"])
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.MAMBA2,
        num_heads=heads,
        num_key_heads=cfg.int(names["groups"], 1),
        key_head_dim=cfg.int(names["state"]),
        value_head_dim=head_dim,
        conv_kernel=cfg.int(names["conv"], 4),
    )


#: Mamba2 field names per family (transformers 5.24 configuration classes).
_MAMBA2_FIELDS: dict[str, dict[str, str]] = {
    **{
        family: {
            "heads": "mamba_n_heads",
            "head_dim": "mamba_d_head",
            "state": "mamba_d_state",
            "groups": "mamba_n_groups",
            "conv": "mamba_d_conv",
            "expand": "mamba_expand",
            "intermediate": "mamba_d_ssm" if family == "falcon_h1" else "",
        }
        for family in ("falcon_h1", "bamba", "granitemoehybrid")
    },
    "nemotron_h": {
        "heads": "mamba_num_heads",
        "head_dim": "mamba_head_dim",
        "state": "ssm_state_size",
        "groups": "n_groups",
        "conv": "conv_kernel",
        "expand": "expand",
        "intermediate": "",
    },
    "mamba2": {
        "heads": "num_heads",
        "head_dim": "head_dim",
        "state": "state_size",
        "groups": "n_groups",
        "conv": "conv_kernel",
        "expand": "expand",
        "intermediate": "",
    },
    "zamba2": {
        "heads": "n_mamba_heads",
        "head_dim": "mamba_headdim",
        "state": "mamba_d_state",
        "groups": "mamba_ngroups",
        "conv": "mamba_d_conv",
        "expand": "mamba_expand",
        "intermediate": "",
    },
}


def _mamba1(cfg: _Config, count: int) -> LinearAttention:
    """Mamba-1 (Jamba, Zamba): per channel of intermediate = expand * hidden a d_state vector
    and a conv window; Zamba splits the channels into `n_mamba_heads`."""
    intermediate = cfg.int("mamba_expand", 2) * cfg.int("hidden_size")
    heads = cfg.int("n_mamba_heads", 1)
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.MAMBA,
        num_heads=heads,
        num_key_heads=0,
        key_head_dim=cfg.int("mamba_d_state", 16),
        value_head_dim=intermediate // heads,
        conv_kernel=cfg.int("mamba_d_conv", 4),
    )


def _attention_head_dim(cfg: _Config) -> int:
    """Zamba's shared attention works on 2 x hidden: head dim 2 * hidden / heads by default."""
    heads = cfg.int("num_attention_heads")
    return cfg.int("attention_head_dim", 2 * cfg.int("hidden_size") // heads)


def _zamba_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    if kind == "full":
        heads = cfg.int("num_attention_heads")
        return GqaAttention(
            num_layers=count,
            num_q_heads=heads,
            num_kv_heads=cfg.int("num_key_value_heads", heads),
            head_dim=_attention_head_dim(cfg),
        )
    return _mamba2(cfg, count) if cfg.model_type == "zamba2" else _mamba1(cfg, count)


_LEGACY_LAYER_NAMES = {
    "mamba": "linear_attention",
    "m2": "linear_attention",
    "attention": "full_attention",
    "full_attention": "full_attention",
    "linear_attention": "linear_attention",
    "hybrid": "hybrid",
    "mlp": "mlp",
    "moe": "moe",
    "conv": "conv",
    "sliding_attention": "sliding_attention",
}


def _block_types(cfg: _Config, *keys: str) -> list[str] | None:
    """A per-layer type list under one of `keys`, in transformers' current names."""
    for key in keys:
        names = cfg.get(key)
        if names is not None:
            try:
                return [_LEGACY_LAYER_NAMES[str(name)] for name in names]
            except KeyError as err:
                raise UnsupportedConfigError(
                    f"{cfg.model_type} config: unknown layer type {err}"
                ) from None
    return None


def _zamba_plan(cfg: _Config) -> _LayerPlan:
    """Every layer runs Mamba; a hybrid layer also runs the shared attention block (its own
    KV per layer, weights shared) with its MLP."""
    n = cfg.int("num_hidden_layers")
    types = _block_types(cfg, "layers_block_type")
    if types is None and cfg.model_type == "zamba":
        period, offset = cfg.int("attn_layer_period", 6), cfg.int("attn_layer_offset", 4)
        types = ["linear_attention"] * 2 + ["hybrid"]
        types += ["hybrid" if i % period == offset else "linear_attention" for i in range(n - 3)]
    if types is None:
        raise UnsupportedConfigError(f"{cfg.model_type} config lacks layers_block_type")
    hybrid = [t for t in types if t == "hybrid"]
    return _LayerPlan(
        ["linear"] * len(types) + ["full"] * len(hybrid), ["dense"] * len(hybrid), len(types)
    )


def _falcon_h1_plan(cfg: _Config) -> _LayerPlan:
    """Attention and Mamba2 side by side in every layer, then the MLP."""
    n = cfg.int("num_hidden_layers")
    return _LayerPlan(["full"] * n + ["linear"] * n, ["dense"] * n, n)


def _mamba2_attention_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    return _gqa(cfg, count) if kind == "full" else _mamba2(cfg, count)


def _nemotron_h_plan(cfg: _Config) -> _LayerPlan:
    """Each layer is one of Mamba2 (M), attention (*), MLP (-) or MoE (E)."""
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        symbols = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
        try:
            types = [symbols[c] for c in pattern]
        except KeyError as err:
            raise UnsupportedConfigError(f"nemotron_h pattern: unknown symbol {err}") from None
    else:
        types = _block_types(cfg, "layers_block_type", "layer_types") or [
            "linear_attention",
            "moe",
            "full_attention",
            "mlp",
        ]
    mixers = [
        {"linear_attention": "linear", "full_attention": "full"}[t]
        for t in types
        if t
        in (
            "linear_attention",
            "full_attention",
        )
    ]
    mlps = [{"mlp": "dense", "moe": "moe"}[t] for t in types if t in ("mlp", "moe")]
    if len(mixers) + len(mlps) != len(types):
        raise UnsupportedConfigError(f"nemotron_h config: unknown layer types {sorted(set(types))}")
    return _LayerPlan(mixers, mlps, len(types))


def _attention_or_mamba_plan(cfg: _Config) -> _LayerPlan:
    """Jamba / Bamba / GraniteMoeHybrid: each layer attention or Mamba, then an MLP."""
    n = cfg.int("num_hidden_layers")
    types = _block_types(cfg, "layer_types", "layers_block_type")
    if types is None and cfg.has("attn_layer_indices"):  # bamba
        attention = set(cfg.get("attn_layer_indices"))
        types = ["full_attention" if i in attention else "linear_attention" for i in range(n)]
    if types is None and cfg.model_type == "jamba":
        period, offset = cfg.int("attn_layer_period", 8), cfg.int("attn_layer_offset", 4)
        types = ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]
    if types is None:
        types = ["linear_attention"] * n
    mixers = ["full" if t == "full_attention" else "linear" for t in types]
    if cfg.model_type == "jamba" and cfg.int("num_experts", 16) > 1:
        period, offset = cfg.int("expert_layer_period", 2), cfg.int("expert_layer_offset", 1)
        mlps = ["moe" if i % period == offset else "dense" for i in range(n)]
    elif cfg.model_type == "granitemoehybrid" and cfg.int("num_local_experts", 8) > 0:
        mlps = ["moe"] * n
    else:
        mlps = ["dense"] * n
    return _LayerPlan(mixers, mlps)


def _jamba_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    return _gqa(cfg, count) if kind == "full" else _mamba1(cfg, count)


def _granite_mlp(cfg: _Config, kind: str, count: int) -> MlpGroup:
    """A shared MLP of `shared_intermediate_size` in every layer, plus routed experts."""
    shared = cfg.int("shared_intermediate_size", 1024)
    if kind == "dense":
        return DenseMlp(count, shared)
    return MoeMlp(
        num_layers=count,
        num_experts=cfg.int("num_local_experts", 8),
        experts_per_token=cfg.int("num_experts_per_tok", 2),
        expert_intermediate_size=cfg.int("intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=shared,
    )


def _lfm2_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")
    types = _block_types(cfg, "layer_types")
    if types is None:
        full = set(cfg.get("full_attn_idxs", range(n)))
        types = ["full_attention" if i in full else "conv" for i in range(n)]
    return _LayerPlan(["full" if t == "full_attention" else "conv" for t in types], ["dense"] * n)


def _lfm2_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    """LFM2's short convolution keeps the last L_cache - 1 inputs of `hidden` channels."""
    if kind == "full":
        return _gqa(cfg, count)
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.SHORT_CONV,
        num_heads=1,
        num_key_heads=0,
        key_head_dim=0,
        value_head_dim=cfg.int("hidden_size"),
        conv_kernel=cfg.int("conv_L_cache", 3),
    )


def _olmo_hybrid_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    """Gated DeltaNet with OLMo's defaults (key heads = attention heads, key dim 0.75 *
    hidden / heads, value dim twice that)."""
    if kind == "full":
        return _gqa(cfg, count)
    heads = cfg.int("num_attention_heads")
    key_heads = cfg.int("linear_num_key_heads", heads)
    key_dim = cfg.int("linear_key_head_dim", int(0.75 * cfg.int("hidden_size") / key_heads))
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.GATED_DELTANET,
        num_heads=cfg.int("linear_num_value_heads", heads),
        num_key_heads=key_heads,
        key_head_dim=key_dim,
        value_head_dim=cfg.int("linear_value_head_dim", 2 * key_dim),
        conv_kernel=cfg.int("linear_conv_kernel_dim", 4),
    )


def _olmo_hybrid_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")

    def fallback(i: int) -> str:
        last_full = i == n - 1 and n < 4
        return "full_attention" if i % 4 == 3 or last_full else "linear_attention"

    return _LayerPlan(_normalise_layer_types(cfg, fallback), ["dense"] * n)


def _gemma3_plan(cfg: _Config) -> _LayerPlan:
    period = cfg.int("sliding_window_pattern", 6)
    mixers = _normalise_layer_types(
        cfg, lambda i: "sliding_attention" if (i + 1) % period else "full_attention"
    )
    return _LayerPlan(mixers, ["dense"] * len(mixers))


def _mamba2_plan(cfg: _Config) -> _LayerPlan:
    n = cfg.int("num_hidden_layers")
    return _LayerPlan(["linear"] * n, [], n)


def _minimax_lightning_plan(cfg: _Config) -> _LayerPlan:
    """MiniMax-Text-01: lightning attention, softmax attention every few layers
    (`attn_type_list`: 1 softmax, 0 lightning; transformers: `layer_types`)."""
    n = cfg.int("num_hidden_layers")
    if cfg.has("attn_type_list") and not cfg.has("layer_types"):
        names = ["full_attention" if t else "linear_attention" for t in cfg.get("attn_type_list")]
        cfg = _Config({**cfg.raw, "layer_types": names}, cfg.model_type)
    mixers = _normalise_layer_types(
        cfg, lambda i: "full_attention" if (i + 1) % 2 else "linear_attention"
    )
    return _LayerPlan(mixers, ["moe"] * n)


def _minimax_lightning_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    """Lightning attention keeps one (head_dim x head_dim) state per head, no conv."""
    full = _gqa(cfg, count)
    if kind == "full":
        return full
    return LinearAttention(
        num_layers=count,
        kind=LinearKind.LIGHTNING,
        num_heads=full.num_q_heads,
        num_key_heads=full.num_q_heads,
        key_head_dim=full.head_dim,
        value_head_dim=full.head_dim,
    )


def _plain_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    return _gqa(cfg, count)


def _deepseek_mixer(cfg: _Config, kind: str, count: int) -> MixerGroup:
    return _mla(cfg, count)


_DENSE = _Family(_dense_plan, _swa_or_gqa, _dense_mlp)
_QWEN_HYBRID = _Family(_qwen_hybrid_plan, _qwen_hybrid_mixer, _qwen_mlp)
_DEEPSEEK = _Family(_deepseek_plan, _deepseek_mixer, _deepseek_mlp)

FAMILIES: dict[str, _Family] = {
    "llama": _DENSE,
    "mistral": _DENSE,
    "qwen2": _DENSE,
    "qwen3": _DENSE,
    "qwen3_moe": _Family(
        lambda c: _LayerPlan(["full"] * c.int("num_hidden_layers"), _sparse_step(c)),
        _plain_mixer,
        _qwen_mlp,
    ),
    "qwen3_next": _QWEN_HYBRID,
    "qwen3_5_text": _QWEN_HYBRID,
    "qwen3_5_moe_text": _QWEN_HYBRID,
    "deepseek_v3": _DEEPSEEK,
    "kimi_k2": _DEEPSEEK,
    "kimi_linear": _Family(_kimi_linear_plan, _kimi_linear_mixer, _deepseek_mlp),
    "gpt_oss": _Family(_gpt_oss_plan, _swa_or_gqa, _local_experts_mlp),
    "minimax_m2": _Family(_minimax_plan, _plain_mixer, _local_experts_mlp),
    "mimo_v2_flash": _Family(_mimo_plan, _mimo_mixer, _mimo_mlp),
    "bailing_hybrid": _Family(_bailing_plan, _bailing_mixer, _bailing_mlp),
    "falcon_h1": _Family(_falcon_h1_plan, _mamba2_attention_mixer, _dense_mlp),
    "nemotron_h": _Family(_nemotron_h_plan, _mamba2_attention_mixer, _nemotron_h_mlp),
    "jamba": _Family(_attention_or_mamba_plan, _jamba_mixer, _jamba_mlp),
    "bamba": _Family(_attention_or_mamba_plan, _mamba2_attention_mixer, _dense_mlp),
    "granitemoehybrid": _Family(_attention_or_mamba_plan, _mamba2_attention_mixer, _granite_mlp),
    "lfm2": _Family(_lfm2_plan, _lfm2_mixer, _dense_mlp),
    "zamba": _Family(_zamba_plan, _zamba_mixer, _dense_mlp),
    "zamba2": _Family(_zamba_plan, _zamba_mixer, _dense_mlp),
    "olmo_hybrid": _Family(_olmo_hybrid_plan, _olmo_hybrid_mixer, _dense_mlp),
    "gemma3_text": _Family(_gemma3_plan, _swa_or_gqa, _dense_mlp),
    "mamba2": _Family(_mamba2_plan, lambda cfg, kind, n: _mamba2(cfg, n), _dense_mlp),
    "minimax": _Family(_minimax_lightning_plan, _minimax_lightning_mixer, _local_experts_mlp),
}
#: Multimodal wrappers whose language model sits in `text_config`.
_TEXT_WRAPPERS = {
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "gemma3": "gemma3_text",
}
SUPPORTED_MODEL_TYPES = sorted([*FAMILIES, *_TEXT_WRAPPERS])


def _group(kinds: list[str], build: Callable[[str, int], Any]) -> tuple[Any, ...]:
    counts = Counter(kinds)
    return tuple(build(kind, counts[kind]) for kind in sorted(counts))


def model_from_hf_config(raw: Mapping[str, Any], name: str) -> ModelSpec:
    """Build a ModelSpec from a parsed config.json."""
    model_type = str(raw.get("model_type", ""))
    if model_type in _TEXT_WRAPPERS:
        text = dict(raw.get("text_config") or {})
        text.setdefault("model_type", _TEXT_WRAPPERS[model_type])
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key in raw and key not in text:
                text[key] = raw[key]
        return model_from_hf_config(text, name)
    family = FAMILIES.get(model_type)
    if family is None:
        raise UnsupportedConfigError(
            f"unsupported model_type {model_type or '(none)'!r} "
            f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    cfg = _Config(raw, model_type)
    plan = family.plan(cfg)
    try:
        return ModelSpec(
            name=name,
            hidden_size=cfg.int("hidden_size"),
            vocab_size=cfg.int("vocab_size"),
            mixers=_group(plan.mixers, lambda kind, n: family.mixer(cfg, kind, n)),
            mlps=_group(plan.mlps, lambda kind, n: family.mlp(cfg, kind, n)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            weight_dtype_bytes=_weight_dtype_bytes(cfg),
            num_blocks=plan.num_blocks,
        )
    except ValueError as err:
        raise UnsupportedConfigError(f"{model_type} config: {err}") from None


def load_hf_config(path: Path) -> ModelSpec:
    """Read a config.json (or a checkpoint directory holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        raw = json.loads(file.read_text())
    except OSError as err:
        raise SpecFileError(f"{file}: cannot read ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise SpecFileError(f"{file}: not valid JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(raw, dict):
        raise SpecFileError(f"{file}: expected a JSON object")
    # A checkpoint is named by its directory; a loose file by its own name.
    if path.is_dir() or path.stem == "config":
        name = file.parent.resolve().name
    else:
        name = path.stem
    return dataclasses.replace(model_from_hf_config(raw, name), config_path=file.resolve())
