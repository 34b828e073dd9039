"""Prompt synthesis: exact byte lengths, shared prefixes exactly where hash ids match."""

from __future__ import annotations

import pytest

from prfaas.bench import PromptSynthesizer, TokenUnit


def test_byte_prompts_have_the_exact_length() -> None:
    synth = PromptSynthesizer(TokenUnit.BYTE)
    for length in (1, 7, 512, 513, 1300):
        assert len(synth.prompt(length, [1, 2, 3], "r")) == length
        assert len(synth.prompt(length, [], "r").encode()) == length


def test_equal_leading_ids_give_equal_prefixes_and_no_more() -> None:
    synth = PromptSynthesizer(TokenUnit.BYTE, block_tokens=512)
    a = synth.prompt(1300, [0, 1, 2], "a")
    b = synth.prompt(1400, [0, 1, 9], "b")
    c = synth.prompt(1300, [5, 1, 2], "c")
    assert a[:1024] == b[:1024]
    assert a[1024:1100] != b[1024:1100]
    assert a[:512] != c[:512]


def test_partial_last_block_is_a_prefix_of_the_full_block() -> None:
    synth = PromptSynthesizer(TokenUnit.BYTE, block_tokens=512)
    full = synth.prompt(1024, [0, 1], "x")
    partial = synth.prompt(700, [0, 1], "y")
    assert full.startswith(partial)


def test_tokens_beyond_the_ids_are_unique_per_request() -> None:
    synth = PromptSynthesizer(TokenUnit.BYTE, block_tokens=512)
    a, b = synth.prompt(1200, [0], "a"), synth.prompt(1200, [0], "b")
    assert a[:512] == b[:512] and a[512:] != b[512:]


def test_deterministic_across_instances_and_seeded() -> None:
    one = PromptSynthesizer(TokenUnit.BYTE, seed=3).prompt(900, [4, 5], "r")
    two = PromptSynthesizer(TokenUnit.BYTE, seed=3).prompt(900, [4, 5], "r")
    other = PromptSynthesizer(TokenUnit.BYTE, seed=4).prompt(900, [4, 5], "r")
    assert one == two != other


def test_word_prompts_have_one_word_per_token() -> None:
    text = PromptSynthesizer(TokenUnit.WORD, block_tokens=16).prompt(40, [1, 2], "r")
    words = text.split(" ")
    assert words[0] == "" and len(words) == 41


def test_a_prompt_needs_a_token() -> None:
    with pytest.raises(ValueError, match="at least one token"):
        PromptSynthesizer(TokenUnit.BYTE).prompt(0, [], "r")
