"""Request bodies as JSON that cannot push the parser over: the one place raw bytes are decoded.

Python's `json` accepts things no API server should take from a client, and fails on others
with exceptions that are not `JSONDecodeError` (a plain-text 500 if they escape). `load_json`
turns every one into a `BadRequestError` (OpenAI 400) before or while parsing:

    not UTF-8 (strict)                      checked on the bytes
    nesting deeper than MAX_JSON_DEPTH      counted on the bytes before parsing, so the
                                            decoder never recurses deep (RecursionError)
    an integer of more than MAX_INT_DIGITS  refused in `parse_int`, before `int()` (whose own
                                            limit, 4300 digits, raises ValueError)
    NaN, Infinity, 1e999                    refused (`parse_constant`, `parse_float`)
    a lone UTF-16 surrogate ("\\ud800")       refused after parsing: such a str cannot be
                                            encoded again (the tokenizer call would fail)

Memory: the caller bounds the bytes (`serve.edge.guard` stops reading at `max_body_bytes`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from prfaas.serve.errors import BadRequestError

MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 4300  # CPython's default int <-> str limit (sys.get_int_max_str_digits)

_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)  # strings (skipped), brackets
_OPEN = frozenset(b"[{")


def load_json(raw: bytes) -> Any:
    """The JSON value of `raw`, or a `BadRequestError` that says what is wrong with it."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadRequestError(f"the body is not valid UTF-8 (byte {err.start})") from None
    _check_depth(raw)
    try:
        data = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant
        )
    except json.JSONDecodeError as err:
        raise BadRequestError(f"the body is not valid JSON: {err}") from None
    except RecursionError:  # unreachable after _check_depth; kept as a hard floor
        raise BadRequestError(f"the body nests deeper than {MAX_JSON_DEPTH} levels") from None
    _check_strings(data)
    return data


def _check_depth(raw: bytes) -> None:
    depth = 0
    for match in _TOKENS.finditer(raw):
        token = match.group()
        if len(token) != 1:
            continue  # a string: brackets inside it do not nest
        if token[0] in _OPEN:
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise BadRequestError(f"the body nests deeper than {MAX_JSON_DEPTH} levels")
        else:
            depth -= 1


def _parse_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise BadRequestError(f"the body holds an integer of more than {MAX_INT_DIGITS} digits")
    return int(digits)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadRequestError(f"the number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise BadRequestError(f"{name} is not a JSON number")


def _check_strings(data: Any) -> None:
    """Every string (keys too) must be encodable as UTF-8: no lone surrogates. Iterative, so
    it needs no recursion whatever the (already bounded) depth."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _encodable(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                _encodable(key)
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _encodable(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise BadRequestError(
            f"the body holds a lone UTF-16 surrogate (\\u{ord(text[err.start]):04x}); "
            "strings must be valid Unicode"
        ) from None
