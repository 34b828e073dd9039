"""Helpers of the engine tests: prompts and transformers' own greedy `generate()`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch

from prfaas.engine import (
    PRESETS,
    Completion,
    Engine,
    EngineConfig,
    LoadedModel,
    SamplingParams,
    build_preset,
)
from prfaas.engine.disk_tier import DiskTierConfig

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


GREEDY = SamplingParams(max_tokens=6)


def cached_pages(model: LoadedModel, prompt: list[int]) -> int:
    """Pages the prompt leaves cached in a pool large enough to keep everything."""
    engine = Engine(model, SMALL)
    engine.generate([prompt], GREEDY)
    return engine.paged.pool.stats().num_used_pages


def tiered_engine(model: LoadedModel, num_pages: int, directory: Path) -> Engine:
    disk = DiskTierConfig(directory, capacity_bytes=64 * 1024 * 1024)
    config = dataclasses.replace(SMALL, capacity_bytes=None, num_pages=num_pages, disk_tier=disk)
    return Engine(model, config)


def prefix_on_disk(model: LoadedModel, directory: Path) -> tuple[Engine, list[int], Completion]:
    """An engine with a disk tier whose prompt, computed once (that completion returned), was
    pushed out of DRAM by other prompts: its hit is whole only across DRAM and disk."""
    prompt = prompt_ids(model, SYSTEM + "Keep this prefix on disk for me, please.")
    others = [
        prompt_ids(model, f"Unrelated question number {i}: what is {i} + {i}?") for i in range(8)
    ]
    engine = tiered_engine(model, 2 * cached_pages(model, prompt), directory)
    (first,) = engine.generate([prompt], GREEDY)
    probe = engine.paged.request("probe", prompt, 0, imported=False)
    k = probe.max_hit_blocks
    assert k
    pool = engine.paged.pool
    for other in others:
        engine.generate([other], GREEDY)
        if pool.dram_match(probe).hit_blocks < k:
            break
    assert pool.dram_match(probe).hit_blocks < k  # no longer whole in DRAM
    assert pool.match(probe).hit_blocks == k  # whole across DRAM and disk
    assert any(directory.glob("*.unit"))
    return engine, prompt, first
