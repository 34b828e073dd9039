"""Helpers of the engine tests: prompts and transformers' own greedy `generate()`."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from prfaas.engine import PRESETS, EngineConfig, LoadedModel, build_preset

#: Small blocks and chunks so short prompts cross several blocks, chunks and snapshots.
SMALL = EngineConfig(block_tokens=8, chunk_tokens=16, capacity_bytes=8 * 1024 * 1024)
PRESET_NAMES = sorted(PRESETS)
#: The presets the general engine tests run on (one per pool-group kind: dense GQA, GDN, MLA +
#: KDA, SWA); every further family runs through test_families.py.
CORE_NAMES = ["tiny-kimi-linear", "tiny-llama", "tiny-qwen3-next", "tiny-swa"]
HYBRID_NAMES = ["tiny-kimi-linear", "tiny-qwen3-next", "tiny-swa"]

_BUILT: dict[str, LoadedModel] = {}


def preset(name: str) -> LoadedModel:
    """Each preset built once per session (its weights are deterministic anyway)."""
    if name not in _BUILT:
        _BUILT[name] = build_preset(name)
    return _BUILT[name]


SYSTEM = "You are a careful assistant. Answer briefly. "


def prompt_ids(model: LoadedModel, text: str) -> list[int]:
    return model.tokenizer.encode_prompt(text, chat=False)


def hf_greedy(model: LoadedModel, prompt: Sequence[int], max_tokens: int) -> list[int]:
    """Reference tokens from transformers' `generate()` (stops after EOS like the engine)."""
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        out = model.model.generate(ids, max_new_tokens=max_tokens, do_sample=False)
    return [int(t) for t in out[0, len(prompt) :]]
