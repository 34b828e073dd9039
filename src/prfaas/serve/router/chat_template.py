"""A checkpoint's chat template, rendered in the router as transformers renders it.

The torch backend renders a prompt with `tokenizer.apply_chat_template(..., tokenize=False)`
(transformers' `utils/chat_template_utils.py`); the router must produce the same text from the
same template without importing transformers (docs/architecture.md walls), so it rebuilds the
environment that function uses, piece by piece:

    sandbox         jinja2's `ImmutableSandboxedEnvironment` (templates are untrusted code)
    whitespace      `trim_blocks` and `lstrip_blocks`
    extensions      `loopcontrols` (`break`, `continue`); `{% generation %}` renders its body
    filters         `tojson`: `json.dumps` with `ensure_ascii=False` (jinja's own escapes HTML)
    globals         `raise_exception(message)` (a `TemplateError`), `strftime_now(format)`,
                    a `dict` constructor, a `namespace` that refuses underscore attributes
    variables       `messages`, `tools` and `documents` (None), `add_generation_prompt`, and
                    the tokenizer's named special tokens (`bos_token`, `eos_token`, ...)

Messages reach the template as plain dicts with their None fields dropped, as transformers'
`_normalize_chat_messages` leaves them. A template that fails to compile or render raises
`jinja2.TemplateError`; the caller then asks an instance (`serve.router.prompt_tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers marks assistant spans with it
    (for training masks); rendering for inference keeps the body as it is."""

    tags = {"generation"}  # noqa: RUF012  (jinja2's class attribute)

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


class _Dict:
    """`dict(...)` for templates, without the attributes of the type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args)


class _Namespace(jinja2.utils.Namespace):
    """jinja's `namespace`, refusing underscore names (no way to CPython's internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja's own signature trick
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _check_name(name: object) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"chat templates cannot store underscore-prefixed attributes: {name!r}"
        )


def compile_template(source: str) -> jinja2.Template:
    """`source` compiled in transformers' chat-template environment (`TemplateError` when
    it does not compile)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _Dict()
    env.globals["namespace"] = _Namespace
    return env.from_string(source)


def render(
    template: jinja2.Template,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    special_tokens: Mapping[str, str],
) -> str:
    """The prompt text of `messages`, as `apply_chat_template(messages, tokenize=False,
    add_generation_prompt=...)` gives it for a tokenizer whose named special tokens are
    `special_tokens`."""
    plain = [{k: v for k, v in m.items() if v is not None} for m in messages]
    return template.render(
        messages=plain,
        tools=None,
        documents=None,
        add_generation_prompt=add_generation_prompt,
        **special_tokens,
    )
