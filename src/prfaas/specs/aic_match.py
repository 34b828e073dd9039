"""Which of aiconfigurator's bundled models times a model read from a Hugging Face config.json:
the one with the same architecture and shapes, so a checkpoint outside our catalog (a
DeepSeek-V3 given by its config.json) is timed by aiconfigurator's data, not the roofline.

aiconfigurator times a model it knows by id (`EngineHandle.compile("deepseek-ai/DeepSeek-V3",
...)`): its kernel tables were collected for those models' shapes. A config matches an id when
everything aiconfigurator reads to build the model it times is equal (its
`sdk.models._get_model_info`, what its `get_model` reads):

    architecture, layers, heads, KV heads, head dim, hidden size, intermediate sizes,
    vocabulary, experts, top-k, shared experts, MoE layers, the family's extra shapes
    (MLA ranks, hybrid layer patterns, sliding windows, ...)
    the quantization modes it derives from the checkpoint (`_infer_quant_modes_from_raw_config`:
    GEMM, MoE, KV cache) and the modules the quantization leaves out

and only the context length (`max_position_embeddings`) may differ: it bounds prompts, it does
not change a kernel's time. Models of identical shapes (DeepSeek-V3 and R1) time identically;
the id named after the model wins, else the first in order. A config aiconfigurator cannot
read (an architecture it lacks, a quantization it refuses) matches nothing.

Called by `specs.aic.aic_model_id` only, so aiconfigurator is imported only when a plan asks
for its timing.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

#: What aiconfigurator reads but does not time with: the raw dict (its timing fields are read
#: out of it below) and the context length.
_UNTIMED_FIELDS = frozenset({"raw_config", "context"})

#: The quantization file a checkpoint may hold beside its config.json (ModelOpt's), which
#: aiconfigurator reads as part of the checkpoint.
_QUANT_CONFIG = "hf_quant_config.json"


def _timing_fields(model_path: str) -> dict[str, Any] | None:
    """What aiconfigurator times for the model at `model_path` (a bundled id or a checkpoint
    directory), None when it cannot read it."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    from aiconfigurator_core.sdk.models import _get_model_info, _infer_quant_modes_from_raw_config
    from aiconfigurator_core.sdk.models.helpers import quant_exclude_patterns

    try:
        info = _get_model_info(model_path)
        raw = info.get("raw_config") or {}
        quant = _infer_quant_modes_from_raw_config(raw, info["architecture"])
        excluded = sorted(str(pattern) for pattern in quant_exclude_patterns(raw))
    except Exception:  # its own error types: a config it cannot read is a model it lacks
        return None
    fields = {key: value for key, value in info.items() if key not in _UNTIMED_FIELDS}
    return fields | {"quant_modes": quant, "quant_excluded": excluded}


@cache
def _bundled_fields() -> tuple[tuple[str, dict[str, Any]], ...]:
    """Every bundled model id with its timing fields, in id order, read once per process."""
    from aiconfigurator_core.sdk.common import DefaultHFModels

    readable = ((hf_id, _timing_fields(hf_id)) for hf_id in sorted(DefaultHFModels))
    return tuple((hf_id, fields) for hf_id, fields in readable if fields is not None)


def _config_fields(config_file: Path) -> dict[str, Any] | None:
    """The timing fields of one config.json: a checkpoint's (named config.json, with its
    hf_quant_config.json if it has one) is read where it is; a loose file is read as the only
    file of a checkpoint, since aiconfigurator reads checkpoint directories."""
    if config_file.name == "config.json":
        return _timing_fields(str(config_file.parent))
    with tempfile.TemporaryDirectory(prefix="prfaas-aic-") as checkpoint:
        shutil.copyfile(config_file, Path(checkpoint) / "config.json")
        return _timing_fields(checkpoint)


@cache
def matching_model_id(config_file: Path, name: str) -> str | None:
    """aiconfigurator's id of the bundled model that `config_file` matches (module docstring),
    None when none does. `name` (the model's) picks among models of identical shapes."""
    fields = _config_fields(config_file)
    if fields is None:
        return None
    matches = [hf_id for hf_id, bundled in _bundled_fields() if bundled == fields]
    named = [hf_id for hf_id in matches if hf_id.partition("/")[2].lower() == name.lower()]
    preferred = named or matches
    return preferred[0] if preferred else None
