"""A checkpoint's tokenizer, read by the router from the model directory.

With it the router encodes a real checkpoint's prompts itself, as it does the byte
tokenizer's, so no `/tokenize` call precedes a request (`serve.router.prompt_tokens`). It
uses HF's Rust `tokenizers` on the directory's `tokenizer.json` and renders the chat
template with `serve.router.chat_template`; transformers is never imported (the walls of
docs/architecture.md). The ids must be the instance's, bit for bit, so the directory is read
only when transformers' `AutoTokenizer` would encode with exactly that file:

    tokenizer.json          required; the slow files alone (vocab.json, *.model) need
                            transformers' conversion
    tokenizer_class         `TokenizersBackend` or `PreTrainedTokenizerFast`: model-specific
                            classes (and none named: one picked by model type) rebuild
                            their pipeline from the vocabulary with their own rules
    add_bos/eos_token       absent: set, transformers rewrites the post-processor
    added tokens            every special token (`bos_token`, ..., `extra_special_tokens`)
                            and `added_tokens_decoder` entry already in tokenizer.json's
                            added tokens, no added_tokens.json: else transformers adds them,
                            changing the split
    split_special_tokens    honoured (`Tokenizer.encode_special_tokens`)
    Mistral files           none (`tekken.json`, `tokenizer.model.v*`: vLLM then encodes
                            with mistral_common)
    chat template           `chat_template.jinja`, else tokenizer_config.json's string or
                            its list's `default`; the additional_chat_templates folder is not
                            read (a directory that has one is refused)

Anything else is `TokenizerUnavailable` with the reason; the router then asks an instance.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from tokenizers import Tokenizer

from prfaas.serve.router.chat_template import compile_template, render

#: The classes `AutoTokenizer` builds straight from tokenizer.json (transformers 5).
GENERIC_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
#: transformers' `SPECIAL_TOKENS_ATTRIBUTES`: the template sees them by these names.
SPECIAL_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_REWRITING_KEYS = ("add_bos_token", "add_eos_token", "model_specific_special_tokens")


class TokenizerUnavailable(Exception):
    """The router cannot guarantee the instance's ids from this directory (the reason)."""


@dataclass(frozen=True, slots=True)
class ModelTokenizer:
    """A checkpoint's tokenizer and chat template, as the torch and vLLM instances use them."""

    tokenizer: Tokenizer
    chat_template: jinja2.Template | None
    special_tokens: dict[str, str]

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        """`tokenizer.encode(text, add_special_tokens=...)`."""
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def prompt_ids(self, text: str, *, add_special_tokens: bool, as_chat_turn: bool) -> list[int]:
        """A completion prompt's ids as the torch and vLLM backends encode it: the text's
        (with or without special tokens), or, for an instance that declares
        `prompt_as_chat_turn`, its user turn's (the template writes the specials)."""
        if add_special_tokens and as_chat_turn:
            return self.encode(self.user_turn(text), add_special_tokens=False)
        return self.encode(text, add_special_tokens=add_special_tokens)

    def user_turn(self, text: str) -> str:
        """`text` as one user turn of the chat template with its generation prompt
        (`jinja2.TemplateError` when the template refuses it)."""
        if self.chat_template is None:
            raise jinja2.TemplateError("the model has no chat template")
        messages = [{"role": "user", "content": text}]
        return render(
            self.chat_template,
            messages,
            add_generation_prompt=True,
            special_tokens=self.special_tokens,
        )


def load_model_tokenizer(directory: Path) -> ModelTokenizer:
    """The tokenizer in `directory`; `TokenizerUnavailable` says why not."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise TokenizerUnavailable(f"{path} is not readable here")
    if (directory / "added_tokens.json").exists():
        raise TokenizerUnavailable("added_tokens.json: transformers adds its tokens")
    if [*directory.glob("tekken.json"), *directory.glob("tokenizer.model.v*")]:
        raise TokenizerUnavailable("a Mistral-format tokenizer (vLLM loads mistral_common's)")
    config = _json(directory / "tokenizer_config.json")
    _check_class(config)
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a plain Exception for a bad file
        raise TokenizerUnavailable(f"{path}: {err}") from None
    specials = _special_tokens(config, _json(directory / "special_tokens_map.json"))
    missing = _tokens_added_by_transformers(config, specials, tokenizer)
    if missing:
        raise TokenizerUnavailable(
            f"{missing[0]!r} is a token tokenizer.json lacks (transformers adds it)"
        )
    tokenizer.encode_special_tokens = bool(config.get("split_special_tokens", False))
    return ModelTokenizer(tokenizer, _chat_template(directory, config), specials)


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TokenizerUnavailable(f"{path}: {err}") from None
    if not isinstance(data, dict):
        raise TokenizerUnavailable(f"{path}: not a JSON object")
    return data


def _check_class(config: dict[str, Any]) -> None:
    name = config.get("tokenizer_class")
    if name is not None and name not in GENERIC_CLASSES:
        raise TokenizerUnavailable(
            f"tokenizer_class {name} builds its own pipeline in transformers, which "
            "tokenizer.json alone does not guarantee"
        )
    if name is None:
        raise TokenizerUnavailable("no tokenizer_class: transformers picks one by model type")
    rewriting = [key for key in _REWRITING_KEYS if key in config]
    if isinstance(config.get("extra_special_tokens"), dict):
        rewriting.append("extra_special_tokens")
    if rewriting:
        raise TokenizerUnavailable(f"{rewriting[0]} makes transformers rewrite the tokenizer")


def _special_tokens(config: dict[str, Any], legacy_map: dict[str, Any]) -> dict[str, str]:
    """The named special tokens as strings, as the template sees them: tokenizer_config.json's;
    special_tokens_map.json's over them when the config has no `added_tokens_decoder`
    (transformers reads the legacy map only then)."""
    sources = (config,) if "added_tokens_decoder" in config else (config, legacy_map)
    found: dict[str, str] = {}
    for source in sources:
        for name in SPECIAL_NAMES:
            value = _content(source.get(name))
            if value is not None:
                found[name] = value
    return found


def _content(value: Any) -> str | None:
    """A token as a config names it: a string or an AddedToken's dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _tokens_added_by_transformers(
    config: dict[str, Any], specials: dict[str, str], tokenizer: Tokenizer
) -> list[str]:
    """The tokens transformers would add to tokenizer.json's when it loads the directory."""
    wanted = set(specials.values())
    for key in ("extra_special_tokens", "additional_special_tokens"):
        extra = config.get(key) or []
        wanted |= {t for t in map(_content, extra if isinstance(extra, list) else []) if t}
    decoder = config.get("added_tokens_decoder") or {}
    wanted |= {t for t in map(_content, decoder.values()) if t}
    added = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
    return sorted(wanted - added)


def _chat_template(directory: Path, config: dict[str, Any]) -> jinja2.Template | None:
    if (directory / "additional_chat_templates").exists():
        raise TokenizerUnavailable("named chat templates in additional_chat_templates/")
    file = directory / "chat_template.jinja"
    source: Any = file.read_text(encoding="utf-8") if file.is_file() else None
    if source is None:
        source = config.get("chat_template")
    if isinstance(source, list):
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
        if source is None:
            raise TokenizerUnavailable("a list of chat templates without a default")
    if source is None:
        return None
    if not isinstance(source, str):
        raise TokenizerUnavailable("chat_template is not a string")
    try:
        return compile_template(source)
    except jinja2.TemplateError as err:
        raise TokenizerUnavailable(f"the chat template does not compile: {err}") from None
