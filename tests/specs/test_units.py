from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.specs.units import format_tokens, parse_tokens


@pytest.mark.parametrize(
    ("text", "tokens"), [("512", 512), ("8K", 8192), ("8k", 8192), ("1.5K", 1536), ("1M", 2**20)]
)
def test_parse(text: str, tokens: int) -> None:
    assert parse_tokens(text) == tokens


@pytest.mark.parametrize("text", ["12Q", "", "K", "-3", "0", "0.3K", "1e3"])
def test_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="token count"):
        parse_tokens(text)


@given(st.integers(1, 10**9))
def test_format_round_trips(tokens: int) -> None:
    assert parse_tokens(format_tokens(tokens)) == tokens
