"""The reference engine: real model execution on transformers/torch over the hybrid pool.

Models come from transformers' own classes (no model maths here): tiny random-weight presets
built offline (`PRESETS`), or a local checkpoint (`load_model`). The pool's groups are derived
from the model (`cache_layout`), every request's cache is kept in `TorchPageStorage` pages
(`paged_cache`), prefill runs the uncached suffix in chunks and can export each layer as soon as
it is done (`prefill`, `export`), another engine imports that export and decodes, and decode
runs continuous batching (`engine`, `batching`).

    engine = Engine(load_model("tiny-qwen3-next"), EngineConfig(block_tokens=16))
    engine.submit("r1", engine.encode("Hello"), SamplingParams(max_tokens=8))
    completions = engine.run()

Errors: see `errors` (EngineError ├ ModelLoadError, BadRequestError, CacheLayoutError,
CacheImportError). Design notes: docs/engine.md.
"""

from __future__ import annotations

from prfaas.engine.config import EngineConfig
from prfaas.engine.engine import Completion, Engine, PrefillOutcome, TokenEvent
from prfaas.engine.errors import (
    BadRequestError,
    CacheImportError,
    CacheLayoutError,
    EngineError,
    ModelLoadError,
)
from prfaas.engine.export import ExportedPrefill
from prfaas.engine.generate import GenerateResult, generate_text
from prfaas.engine.models import LoadedModel, build_preset, load_model
from prfaas.engine.prefix_move import PrefixExport, PrefixRecord
from prfaas.engine.sampling import FinishReason, SamplingParams
from prfaas.engine.storage import TorchPageStorage
from prfaas.specs.presets import PRESETS, ModelPreset, random_weights_notice

__all__ = [
    "PRESETS",
    "BadRequestError",
    "CacheImportError",
    "CacheLayoutError",
    "Completion",
    "Engine",
    "EngineConfig",
    "EngineError",
    "ExportedPrefill",
    "FinishReason",
    "GenerateResult",
    "LoadedModel",
    "ModelLoadError",
    "ModelPreset",
    "PrefillOutcome",
    "PrefixExport",
    "PrefixRecord",
    "SamplingParams",
    "TokenEvent",
    "TorchPageStorage",
    "build_preset",
    "generate_text",
    "load_model",
    "random_weights_notice",
]
