"""What vLLM itself decides for a model directory, as one JSON object on stdout.

    python -m prfaas.integrations.vllm.probe MODEL_DIR [--dtype DTYPE] [-- ENGINE FLAGS...]

Runs in the vLLM venv. The instance shell (core venv, no vLLM or transformers: docs/architecture.md
walls) runs it when prfaas's own config reader (`specs/hf_config.py`) does not know the
directory's `model_type`, or when the directory has no `tokenizer.json`, and maps the answer
to a ModelSpec or a refusal (`serve.backends.vllm.arch`). Everything comes from vLLM's
`ModelConfig`, built by vLLM's own `EngineArgs` from the flags the instance passes its engine
(`--dtype`, the deployment's `vllm.extra_args`: `--kv-cache-dtype`, `--hf-overrides`,
`--trust-remote-code`... count; flags `EngineArgs` does not know are ignored), and, for the
tokenizer, from transformers' `AutoTokenizer`, which is what `vllm serve` loads: no weights
are read and no model is built, so a directory holding only `config.json` answers too.

Cost, measured on the shared 2-core host at load 2-5: 7-10 s with vLLM's model-info cache
warm (importing vLLM is ~5 s of it), ~15 s the first time vLLM inspects an architecture.

Fields (every one always present; `error` only when vLLM refused the directory):
    architecture, model_type, dtype ("float32"...), dtype_bytes, kv_cache_dtype ("auto" is
    the model dtype), kv_dtype_bytes, runner,
    is_hybrid, is_attention_free, has_noops, use_mla, is_moe, is_multimodal,
    is_encoder_decoder, num_layers, num_attention_layers, sliding_window, rswa_window, layer_types,
    heterogeneous_layers, num_attention_heads, num_kv_heads, head_size, hidden_size,
    vocab_size, intermediate_size, tie_word_embeddings, num_experts, experts_per_token,
    moe_intermediate_size, shared_expert_intermediate_size, num_shared_experts,
    dense_mlp_layers, tokenizer_json, tokenizer_error, seconds

The expert counts are vLLM's (`get_num_experts`, `get_num_experts_per_tok`); the expert and
shared-expert widths and the dense layers of a mixture of experts are read from the config
names transformers' MoE families use (`moe_fields`), for compute estimates only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: hf config names of the feed-forward width, in the order transformers' configs use them
#: (GPT-2 `n_inner`, OPT `ffn_dim`); None means 4 x hidden (GPT-2's default).
INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")
#: an expert's width where it differs from `intermediate_size` (Qwen2-MoE, DeepSeek)
EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "expert_intermediate_size")
SHARED_COUNT_KEYS = ("n_shared_experts", "num_shared_experts")


def _first(config: Any, keys: tuple[str, ...]) -> Any:
    return next((getattr(config, key) for key in keys if getattr(config, key, None)), None)


def moe_fields(text: Any, layers: int, intermediate: int) -> dict[str, Any]:
    """A mixture of experts' widths and its dense layers, by transformers' config names:
    `moe_intermediate_size` (else `intermediate_size`) per expert; one shared expert of
    `shared_expert_intermediate_size` (Qwen2-MoE) or `n_shared_experts` of the expert width
    (DeepSeek style); dense layers from `mlp_only_layers`, `first_k_dense_replace` and
    `decoder_sparse_step` (a layer i is sparse when (i + 1) % step == 0)."""
    expert = int(_first(text, EXPERT_WIDTH_KEYS) or intermediate)
    shared = int(getattr(text, "shared_expert_intermediate_size", 0) or 0)
    shared_count = 1 if shared else int(_first(text, SHARED_COUNT_KEYS) or 0)
    dense = set(getattr(text, "mlp_only_layers", None) or ())
    dense |= set(range(int(getattr(text, "first_k_dense_replace", 0) or 0)))
    step = int(getattr(text, "decoder_sparse_step", 1) or 1)
    dense |= {i for i in range(layers) if (i + 1) % step}
    return {
        "moe_intermediate_size": expert,
        "shared_expert_intermediate_size": shared or (expert if shared_count else 0),
        "num_shared_experts": shared_count,
        "dense_mlp_layers": len({i for i in dense if 0 <= i < layers}),
    }


def model_facts(model_dir: str, dtype: str, engine_flags: list[str]) -> dict[str, Any]:
    """vLLM's view of the model (its `ModelConfig` and KV cache dtype), no weights loaded."""
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype, resolve_kv_cache_dtype_string

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    flags = ["--model", model_dir, "--dtype", dtype, *engine_flags]
    engine = EngineArgs.from_cli_args(parser.parse_known_args(flags)[0])
    engine.skip_tokenizer_init = True
    config = engine.create_model_config()
    kv_cache_dtype = resolve_kv_cache_dtype_string(engine.kv_cache_dtype, config)
    parallel = ParallelConfig()
    text = config.hf_text_config
    hidden = config.get_hidden_size()
    intermediate = int(_first(text, INTERMEDIATE_KEYS) or 4 * hidden)
    layers = config.get_total_num_hidden_layers()
    layer_types = getattr(text, "layer_types", None)
    try:
        attention_layers: int | None = config.get_num_layers_by_block_type(parallel, "attention")
    except (ValueError, AssertionError, AttributeError):
        attention_layers = None  # a hybrid vLLM cannot count: refused either way
    return {
        "architecture": config.architecture,
        "model_type": str(getattr(text, "model_type", config.hf_config.model_type)),
        "dtype": str(config.dtype).removeprefix("torch."),
        "dtype_bytes": config.dtype.itemsize,
        "kv_cache_dtype": kv_cache_dtype,
        "kv_dtype_bytes": kv_cache_dtype_str_to_dtype(kv_cache_dtype, config).itemsize,
        "runner": config.runner_type,
        "is_hybrid": bool(config.is_hybrid),
        "is_attention_free": bool(config.is_attention_free),
        "has_noops": bool(config.has_noops),
        "use_mla": bool(config.use_mla),
        "is_moe": bool(config.is_moe),
        "is_multimodal": bool(config.is_multimodal_model),
        "is_encoder_decoder": bool(config.is_encoder_decoder),
        "num_layers": layers,
        "num_attention_layers": attention_layers,
        "sliding_window": config.get_sliding_window(),
        "rswa_window": config.rswa_window,
        "layer_types": list(layer_types) if layer_types else None,
        "heterogeneous_layers": bool(config.model_arch_config.per_layer_overrides),
        "num_attention_heads": config.model_arch_config.total_num_attention_heads,
        "num_kv_heads": config.get_total_num_kv_heads(),
        "head_size": config.get_head_size(),
        "hidden_size": hidden,
        "vocab_size": config.get_vocab_size(),
        "intermediate_size": intermediate,
        "tie_word_embeddings": bool(getattr(text, "tie_word_embeddings", False)),
        "num_experts": config.get_num_experts(),
        "experts_per_token": config.get_num_experts_per_tok(),
        **moe_fields(text, layers, intermediate),
    }


def tokenizer_facts(model_dir: str) -> dict[str, Any]:
    """The fast tokenizer `vllm serve` would load, as `tokenizer.json` text, when the
    directory has none (transformers converts a slow tokenizer's files)."""
    if (Path(model_dir) / "tokenizer.json").exists():
        return {"tokenizer_json": None, "tokenizer_error": None}
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        return {"tokenizer_json": tokenizer.backend_tokenizer.to_str(), "tokenizer_error": None}
    except Exception as err:  # any loader failure is the answer, in one line
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:800]
        return {"tokenizer_json": None, "tokenizer_error": reason}


def probe(model_dir: str, dtype: str, engine_flags: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    facts = {**model_facts(model_dir, dtype, engine_flags), **tokenizer_facts(model_dir)}
    facts["seconds"] = round(time.monotonic() - started, 3)
    return facts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m prfaas.integrations.vllm.probe")
    parser.add_argument("model_dir")
    parser.add_argument("--dtype", default="auto")
    ours, engine_flags = argv, []
    if "--" in argv:  # the engine's other flags follow `--`, as they are
        ours, engine_flags = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(ours)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    out = sys.stdout
    code = 0
    # vLLM logs to stdout: everything but the answer goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        try:
            answer = probe(args.model_dir, args.dtype, engine_flags)
        except Exception as err:  # vLLM refused the directory: its reason, one line
            answer = {"error": " ".join(f"{type(err).__name__}: {err}".split())[:800]}
            code = 1
    out.write(json.dumps(answer) + "\n")
    out.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
