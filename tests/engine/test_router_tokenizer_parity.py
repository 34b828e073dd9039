"""The router's own tokenizer (`serve.router.model_tokenizer`, `chat_template`) gives the ids
the torch backend's tokenizer gives (transformers, in process), for every checkpoint tokenizer
the tests serve: SmolLM2's (the GGUF the engine loads, against the directory `prfaas
tokenizer` writes from it), the vLLM test checkpoints' byte tokenizer (with a chat template),
and the engine's byte tokenizer directory (without one, and with the transcript template).
Prompts and chats are hypothesis-generated: unicode, special-token look-alikes, empty system
messages, text parts; `add_special_tokens` both ways; no tools."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer
from transformers.utils.chat_template_utils import render_jinja_template

from prfaas.engine.models import save_tokenizer, smollm2_path
from prfaas.engine.tokenizer import HfTokenizer, save_byte_tokenizer
from prfaas.integrations.vllm.tiny import save_byte_tokenizer as save_vllm_test_tokenizer
from prfaas.serve import protocol as p
from prfaas.serve.router.chat_template import compile_template, render
from prfaas.serve.router.model_tokenizer import (
    ModelTokenizer,
    TokenizerUnavailable,
    load_model_tokenizer,
)

CHECKPOINTS = ("smollm2", "vllm-tiny", "engine-byte", "engine-byte-transcript")
LOOK_ALIKES = ("<bos>", "<eos>", "<pad>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|user|>")
_TEXT = st.lists(
    st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
              st.sampled_from(LOOK_ALIKES)),
    max_size=6,
).map("".join)  # fmt: skip
_ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
_CONTENT = st.one_of(
    _TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, _TEXT), max_size=3)
)
_MESSAGES = st.lists(st.fixed_dictionaries({"role": _ROLES, "content": _CONTENT}), min_size=1)
_EMPTY_SYSTEM = st.builds(lambda rest: [{"role": "system", "content": ""}, *rest], _MESSAGES)


@functools.cache
def _directory(name: str) -> Path:
    out = Path(tempfile.mkdtemp()) / name
    out.mkdir()
    if name == "smollm2":
        save_tokenizer("smollm2", out)
    elif name == "vllm-tiny":
        save_vllm_test_tokenizer(out)
    else:
        template = p.TRANSCRIPT_CHAT_TEMPLATE if name.endswith("transcript") else None
        save_byte_tokenizer(out, template)
    return out


@functools.cache
def _served(name: str) -> HfTokenizer:
    """The torch backend's tokenizer for that checkpoint (`engine.models.load_checkpoint`)."""
    if name == "smollm2":
        path = smollm2_path()
        return HfTokenizer(AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name))
    return HfTokenizer(AutoTokenizer.from_pretrained(str(_directory(name))))


@functools.cache
def _ours(name: str) -> ModelTokenizer:
    return load_model_tokenizer(_directory(name))


@pytest.mark.parametrize("name", CHECKPOINTS)
@settings(max_examples=60, deadline=None)
@given(text=_TEXT.filter(bool), add_special_tokens=st.booleans())
def test_prompt_ids_are_the_torch_backends(name: str, text: str, add_special_tokens: bool) -> None:
    served = _served(name)
    is_chat = bool(served._tokenizer.chat_template)  # the backend's `prompt_as_chat_turn`
    if add_special_tokens:
        expected = served.encode_prompt(text, chat=is_chat)
    else:
        expected = served.encode_text(text)
    ours = _ours(name).prompt_ids(text, add_special_tokens=add_special_tokens, as_chat_turn=is_chat)
    assert ours == expected


@pytest.mark.parametrize("name", CHECKPOINTS)
@settings(max_examples=40, deadline=None)
@given(messages=st.one_of(_MESSAGES, _EMPTY_SYSTEM))
def test_a_chat_is_encoded_as_the_torch_backend_encodes_it(
    name: str, messages: list[dict[str, Any]]
) -> None:
    """The torch backend's chat: the plain transcript, then its prompt rule."""
    served = _served(name)
    is_chat = bool(served._tokenizer.chat_template)
    transcript = p.plain_transcript(p.ChatPrompt.model_validate({"messages": messages}))
    ours = _ours(name).prompt_ids(transcript, add_special_tokens=True, as_chat_turn=is_chat)
    assert ours == served.encode_prompt(transcript, chat=is_chat)


@pytest.mark.parametrize("name", ["smollm2", "vllm-tiny", "engine-byte-transcript"])
@settings(max_examples=40, deadline=None)
@given(messages=st.one_of(_MESSAGES, _EMPTY_SYSTEM), add_generation_prompt=st.booleans())
def test_chat_templates_render_as_transformers_renders_them(
    name: str, messages: list[dict[str, Any]], add_generation_prompt: bool
) -> None:
    hf = _served(name)._tokenizer
    ours = _ours(name)
    template = ours.chat_template
    assert template is not None
    expected = _outcome(
        lambda: hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    )
    rendered = _outcome(
        lambda: render(
            template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=ours.special_tokens,
        )
    )
    assert rendered == expected


def _outcome(render_it: Callable[[], str]) -> str | type[Exception]:
    """The text, or the kind of error (a template that cannot take these messages fails in
    both: the router then asks an instance)."""
    try:
        return render_it()
    except jinja2.TemplateError:
        return jinja2.TemplateError
    except Exception:
        return Exception


#: The environment's parts a Hub template leans on: whitespace control, loop controls, a
#: namespace, tojson (unicode kept), dict(), `{% generation %}`, raise_exception.
FEATURES = """
{%- set ns = namespace(n=0) -%}
{% for m in messages %}
  {% if m['role'] == 'tool' %}{% continue %}{% endif %}
  {% set ns.n = ns.n + 1 %}
  {{ bos_token }}{{ m | tojson }}{{ dict(k=m['role']) | tojson }}
  {% if m['role'] == 'assistant' %}
    {% generation %}[{{ m['content'] }}]{% endgeneration %}
  {% endif %}
  {% if ns.n > 4 %}{% break %}{% endif %}
{% endfor %}
{% if messages[0]['content'] == 'refuse' %}{{ raise_exception('refused: ' ~ ns.n) }}{% endif %}
{{ ns.n }}{% if add_generation_prompt %}<go>{% endif %}
"""


@settings(max_examples=60, deadline=None)
@given(messages=_MESSAGES, add_generation_prompt=st.booleans())
def test_the_environment_renders_hub_template_features_as_transformers(
    messages: list[dict[str, Any]], add_generation_prompt: bool
) -> None:
    specials = {"bos_token": "<s>", "eos_token": "</s>"}

    def theirs() -> str:
        (text,), _ = render_jinja_template(
            [messages],
            chat_template=FEATURES,
            add_generation_prompt=add_generation_prompt,
            **specials,
        )
        return str(text)

    ours = _outcome(
        lambda: render(
            compile_template(FEATURES),
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=specials,
        )
    )
    assert ours == _outcome(theirs)


def test_raise_exception_and_sandbox_escapes_are_template_errors() -> None:
    refusing = compile_template(FEATURES)
    with pytest.raises(jinja2.TemplateError, match="refused: 1"):
        render(
            refusing,
            [{"role": "user", "content": "refuse"}],
            add_generation_prompt=False,
            special_tokens={},
        )
    escape = compile_template("{{ messages.__class__.__mro__ }}{% set ns = namespace(_x=1) %}")
    with pytest.raises(jinja2.TemplateError):
        render(escape, [{"role": "user", "content": "x"}], add_generation_prompt=False,
               special_tokens={})  # fmt: skip


def _copy(name: str, out: Path) -> Path:
    for file in _directory(name).iterdir():
        (out / file.name).write_bytes(file.read_bytes())
    return out


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: (d / "tokenizer.json").unlink(), "is not readable here"),
        (lambda d: _edit(d, tokenizer_class="LlamaTokenizerFast"), "builds its own pipeline"),
        (lambda d: _edit(d, tokenizer_class=None), "no tokenizer_class"),
        (lambda d: _edit(d, add_bos_token=True), "add_bos_token"),
        (lambda d: _edit(d, unk_token="<unk-not-in-vocab>"), "'<unk-not-in-vocab>'"),
        (lambda d: _edit(d, chat_template="{% for %}"), "does not compile"),
        (lambda d: (d / "added_tokens.json").write_text("{}"), "added_tokens.json"),
        (lambda d: (d / "tekken.json").write_text("{}"), "Mistral-format"),
    ],
    ids=[
        "no-json",
        "class",
        "no-class",
        "add-bos",
        "missing-special",
        "bad-template",
        "added",
        "mistral",
    ],
)
def test_what_it_cannot_guarantee_it_refuses_with_the_reason(
    tmp_path: Path, change: Any, reason: str
) -> None:
    directory = _copy("vllm-tiny", tmp_path)
    change(directory)
    with pytest.raises(TokenizerUnavailable, match=reason):
        load_model_tokenizer(directory)


def _edit(directory: Path, **fields: Any) -> None:
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text())
    for key, value in fields.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    path.write_text(json.dumps(config))
