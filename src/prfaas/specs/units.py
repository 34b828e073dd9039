"""Human token counts: `1K` = 1,024 tokens, as the paper's tables count context lengths."""

from __future__ import annotations

import re

_TOKENS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")
_SCALE = {"": 1, "k": 1024, "m": 1024 * 1024}


def parse_tokens(text: str) -> int:
    """Parse `512`, `8K`, `1.5k`, `1M` into a token count; ValueError with the reason otherwise."""
    match = _TOKENS.match(text)
    if match is None:
        raise ValueError(f"malformed token count {text!r} (use e.g. 512, 8K, 1M)")
    value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if value < 1 or value != int(value):
        raise ValueError(f"token count {text!r} must be a positive whole number of tokens")
    return int(value)


def format_tokens(count: int) -> str:
    """Inverse of `parse_tokens` where exact (8192 -> 8K), else the plain number."""
    for suffix, scale in (("M", 1024 * 1024), ("K", 1024)):
        if count >= scale and count % scale == 0:
            return f"{count // scale}{suffix}"
    return str(count)
