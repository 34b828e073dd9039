"""The vllm backend's output text (`serve.backends.vllm.text`): vLLM's incremental
detokenization and stop-string rule, checked on the byte-level tokenizer the vLLM tests use
(a character's bytes arrive as separate tokens, the hard case for joining texts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from prfaas.integrations.vllm.tiny import save_byte_tokenizer
from prfaas.serve.backends.vllm.text import OutputText, load_tokenizer
from prfaas.serve.errors import BadRequestError


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    out = tmp_path_factory.mktemp("byte-tokenizer")
    save_byte_tokenizer(out)
    return load_tokenizer(out)


def _ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def _print(tokenizer: Tokenizer, prompt: str, output: str, stops: list[str]) -> OutputText:
    text = OutputText(tokenizer, tokenizer.encode(prompt).ids, stops)
    for token_id in _ids(tokenizer, output):
        if text.add(token_id):
            break
    return text


# "<" left out: "<eos>" in a text would be encoded as the special token
TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="<"), max_size=20
)


@settings(max_examples=60, deadline=None)
@given(prompt=TEXT.filter(bool), output=TEXT)
def test_the_text_is_the_outputs_characters_whatever_bytes_the_tokens_split(
    tokenizer: Tokenizer, prompt: str, output: str
) -> None:
    assert _print(tokenizer, prompt, output, []).text == output


@settings(max_examples=60, deadline=None)
@given(output=TEXT, stop=TEXT.filter(bool))
def test_a_stop_string_cuts_the_text_where_it_first_appears(
    tokenizer: Tokenizer, output: str, stop: str
) -> None:
    text = _print(tokenizer, "Q: ", output, [stop])
    cut = output.find(stop)
    assert text.text == (output if cut < 0 else output[:cut])
    assert text.stopped_by == (None if cut < 0 else stop)


@settings(max_examples=60, deadline=None)
@given(output=TEXT, stops=st.lists(TEXT.filter(bool), max_size=3))
def test_streamed_deltas_join_to_the_text_and_never_show_a_cut_stop(
    tokenizer: Tokenizer, output: str, stops: list[str]
) -> None:
    """vLLM's streaming rule: the deltas add up to the final text, and a delta never
    carries characters the end cuts off (so a client never sees part of a stop string)."""
    text = OutputText(tokenizer, tokenizer.encode("Q: ").ids, stops)
    streamed = ""
    for token_id in _ids(tokenizer, output):
        stopped = text.add(token_id)
        streamed += text.delta()
        assert text.text.startswith(streamed)
        if stopped:
            break
    streamed += text.delta(finished=True)
    assert streamed == text.text


def test_the_held_back_tail_is_one_short_of_the_longest_stop(tokenizer: Tokenizer) -> None:
    text = OutputText(tokenizer, tokenizer.encode("Q: ").ids, ["xyz", "q"])
    deltas = []
    for token_id in _ids(tokenizer, "abcdef"):
        text.add(token_id)
        deltas.append(text.delta())
    assert deltas == ["", "", "a", "b", "c", "d"]
    assert text.delta(finished=True) == "ef"


def test_the_stop_string_that_completes_first_wins(tokenizer: Tokenizer) -> None:
    # vLLM checks after every token: "cd" is complete before "bcdef", which starts earlier
    text = _print(tokenizer, "Q: ", "abcdefgh", ["bcdef", "cd"])
    assert (text.text, text.stopped_by) == ("ab", "cd")


def test_special_tokens_print_nothing(tokenizer: Tokenizer) -> None:
    text = OutputText(tokenizer, tokenizer.encode("Q: ").ids, [])
    for token_id in [*_ids(tokenizer, "a"), tokenizer.token_to_id("<eos>"), *_ids(tokenizer, "b")]:
        text.add(token_id)
    assert text.text == "ab"


def test_a_model_without_a_fast_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadRequestError, match=r"tokenizer\.json"):
        load_tokenizer(tmp_path)
