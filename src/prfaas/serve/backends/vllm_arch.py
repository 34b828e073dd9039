"""Architectures prfaas's config reader does not know, served as vLLM sees them.

`specs/hf_config.py` reads ~30 `model_type`s; vLLM serves many more (gpt2, opt, phi3,
granite, ...). For a directory the reader refuses, the instance shell asks vLLM itself: it runs
`prfaas.integrations.vllm.probe` in the vLLM venv (this venv has neither vLLM nor transformers:
DESIGN.md walls), which answers with vLLM's `ModelConfig` facts and, when the directory has no
`tokenizer.json`, the fast tokenizer transformers converts for vLLM. `model_from_probe` turns
that answer into a ModelSpec when prfaas can serve it exactly as it serves llama: every layer
full attention (GqaAttention, KV in vLLM's KV cache dtype) with a dense MLP. Anything else
vLLM reports (hybrid, attention-free, sliding-window or mixed layers, MLA, MoE, per-layer
shapes, scaled or packed KV dtypes, encoder-decoder, multimodal, pooling) is refused with one
line naming the architecture and what prfaas would need, since the router's KV bytes, the
cache identity and the connector's layout would otherwise be guesses.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prfaas.specs.errors import UnsupportedConfigError
from prfaas.specs.model import DenseMlp, GqaAttention, ModelSpec

PROBE_MODULE = "prfaas.integrations.vllm.probe"
PROBE_TIMEOUT_S = 600.0  # 7-15 s measured on 2 shared cores; vLLM's import is ~5 s of it
#: Where a family belongs once prfaas should know it (named in every refusal).
READER = "a family in prfaas.specs.hf_config.FAMILIES"
#: `layer_types` entries vLLM treats as full attention (granite's hybrid config says "attention")
FULL_ATTENTION = ("full_attention", "attention")
#: KV cache dtypes (vLLM's `--kv-cache-dtype`, "auto": the model's) whose cache is plain
#: elements, so a token's KV is heads x head size x the element's bytes; the others (per-token
#: or per-head scales, packed 4-bit) lay out bytes prfaas does not count
PLAIN_KV_DTYPES: tuple[str, ...] = ("auto", "float32", "float", "float16", "half", "bfloat16")
PLAIN_KV_DTYPES += ("fp8", "fp8_e4m3", "fp8_e5m2")


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
    """Why prfaas cannot serve the model vLLM described, or None when every layer is full
    attention over a dense MLP (the llama shape)."""
    return next(_reasons(facts), None)


def _reasons(facts: dict[str, Any]) -> Iterator[str]:
    """Every reason to refuse, most fundamental first."""
    arch = f"{facts['architecture']} (model_type {facts['model_type']!r})"
    layers = int(facts["num_layers"])
    layer_types = facts.get("layer_types") or []
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
    if facts["sliding_window"] or any(t not in FULL_ATTENTION for t in layer_types):
        kinds = "/".join(sorted(set(layer_types)) or ["sliding_attention"])
        window = f" (window {facts['sliding_window']})" if facts["sliding_window"] else ""
        yield (
            f"{arch} has {kinds} layers{window}; prfaas would need each layer kind's cache "
            f"({READER})"
        )
    if facts["heterogeneous_layers"]:
        yield f"{arch} has per-layer head shapes; prfaas would need each layer's ({READER})"
    if facts["num_attention_layers"] != layers:
        yield (
            f"vLLM counts {facts['num_attention_layers']} attention layers of {layers} in "
            f"{arch}; prfaas serves models with attention on every layer"
        )
    if facts["is_moe"]:
        yield f"{arch} is a mixture of experts; prfaas would need its expert layout ({READER})"
    if facts["kv_cache_dtype"] not in PLAIN_KV_DTYPES:
        yield (
            f"{arch} with KV cache dtype {facts['kv_cache_dtype']}: prfaas counts KV of plain "
            f"elements ({', '.join(PLAIN_KV_DTYPES)})"
        )
    if min(facts["num_kv_heads"], facts["head_size"], facts["num_attention_heads"]) < 1:
        yield f"vLLM reports no attention heads for {arch}"


def model_from_probe(facts: dict[str, Any], name: str) -> ModelSpec:
    """The ModelSpec of a full-attention dense model vLLM described (`refusal` is None):
    KV bytes per token = 2 x layers x KV heads x head size x the bytes of vLLM's KV cache
    dtype (its model dtype unless `--kv-cache-dtype` says otherwise)."""
    reason = refusal(facts)
    if reason is not None:
        raise UnsupportedConfigError(reason)
    layers = int(facts["num_layers"])
    try:
        return ModelSpec(
            name=name,
            hidden_size=int(facts["hidden_size"]),
            vocab_size=int(facts["vocab_size"]),
            mixers=(
                GqaAttention(
                    num_layers=layers,
                    num_q_heads=int(facts["num_attention_heads"]),
                    num_kv_heads=int(facts["num_kv_heads"]),
                    head_dim=int(facts["head_size"]),
                    kv_dtype_bytes=int(facts["kv_dtype_bytes"]),
                ),
            ),
            mlps=(DenseMlp(num_layers=layers, intermediate_size=int(facts["intermediate_size"])),),
            tie_word_embeddings=bool(facts["tie_word_embeddings"]),
            weight_dtype_bytes=int(facts["dtype_bytes"]),
        )
    except ValueError as err:
        raise UnsupportedConfigError(f"{facts['architecture']}: {err}") from None
