"""`prfaas tokenizer`: the served model's tokenizer as a directory a client loads with
`AutoTokenizer.from_pretrained`, encoding and decoding exactly as the engine does (the byte
tokenizer of presets and emulated catalog models; SmolLM2's own, chat template included)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from prfaas.cli.app import main
from prfaas.engine.models import smollm2_path
from prfaas.engine.tokenizer import ByteTokenizer, HfTokenizer
from prfaas.serve import protocol as p

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)


@functools.cache
def _written(model: str) -> Any:
    """The tokenizer `prfaas tokenizer --model MODEL` wrote, loaded as a client would."""
    out = Path(tempfile.mkdtemp()) / "tok"
    with pytest.raises(SystemExit) as done:
        main(["tokenizer", "--model", model, "--out", str(out)])
    assert done.value.code in (0, None)
    return AutoTokenizer.from_pretrained(str(out))


@pytest.mark.parametrize("model", ["tiny-qwen3-next", "prfaas-1t"])
def test_the_byte_tokenizer_directory_names_its_specials(model: str) -> None:
    client = _written(model)
    assert (client.bos_token_id, client.eos_token_id, client.pad_token_id) == (257, 258, 256)
    assert len(client) == 259


@settings(deadline=None)  # the first example writes the directory
@given(text=_TEXT)
def test_the_byte_tokenizer_directory_encodes_and_decodes_as_the_engine(text: str) -> None:
    client = _written("tiny-qwen3-next")
    ids = client.encode(text)
    assert ids == ByteTokenizer().encode_prompt(text, chat=False)
    assert client.decode(ids, skip_special_tokens=True) == text
    assert client.decode(ids, skip_special_tokens=True) == ByteTokenizer().decode(ids)


_ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
_CONTENT = st.one_of(
    _TEXT, st.lists(st.builds(lambda t: {"type": "text", "text": t}, _TEXT), max_size=3)
)
_MESSAGES = st.lists(st.fixed_dictionaries({"role": _ROLES, "content": _CONTENT}), min_size=1)


@settings(deadline=None)
@given(messages=_MESSAGES)
def test_the_byte_tokenizer_directory_renders_chats_as_the_chat_endpoint(
    messages: list[dict[str, Any]],
) -> None:
    """A client that renders a chat with the written template and encodes it (as `vllm
    bench serve` counts a chat prompt) gets the ids the server prefills for that chat
    (`instance._encode_chat` on a backend without a template: <bos> + `transcript`)."""
    client = _written("prfaas-1t")
    turns = [p.ChatTurn.model_validate(m) for m in messages]
    rendered = client.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == p.transcript(turns)
    served = ByteTokenizer().encode_prompt(p.transcript(turns), chat=True)
    assert client(rendered)["input_ids"] == served


@functools.cache
def _smollm2() -> HfTokenizer:
    path = smollm2_path()
    return HfTokenizer(AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name))


@settings(max_examples=30, deadline=None)  # the GGUF's tokenizer loads once, slowly
@given(text=_TEXT)
def test_the_smollm2_directory_encodes_as_the_served_checkpoint(text: str) -> None:
    client = HfTokenizer(_written("smollm2-135m"))
    served = _smollm2()
    for chat in (False, True):
        assert client.encode_prompt(text, chat=chat) == served.encode_prompt(text, chat=chat)
    ids = served.encode_prompt(text, chat=False)
    assert client.decode(ids) == served.decode(ids)


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(["tokenizer", *args])
    code = done.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_an_unknown_model_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tok"
    code, err = _run(["--model", "no-such-model", "--out", str(out)], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "unknown model 'no-such-model'" in err
    assert not out.exists()
    (tmp_path / "file").write_text("x")
    code, err = _run(["--model", "prfaas-1t", "--out", str(tmp_path / "file")], capsys)
    assert code == 2 and "is not a directory" in err
