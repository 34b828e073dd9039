"""The router's ids for a vLLM deployment's completion prompts are vLLM's (issue 25 point 4).

vLLM's `/tokenize` (and its completions) encode a prompt with the tokenizer vLLM loads
(`vllm.tokenizers.get_tokenizer`, transformers of the vLLM venv) as
`tokenizer(prompt, add_special_tokens=...)`. A helper in the vLLM venv answers that for each
hypothesis-generated prompt, and the router's own reading of the same directory
(`serve.router.model_tokenizer`) must give the same ids, for the vLLM test checkpoints'
tokenizer. The GPT-2 preset's directory has only the slow files: the router refuses it (and
asks an instance).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.integrations.vllm.tiny import save_byte_tokenizer, save_slow_byte_tokenizer
from prfaas.serve.backends.vllm.child import vllm_python
from prfaas.serve.router.model_tokenizer import (
    ModelTokenizer,
    TokenizerUnavailable,
    load_model_tokenizer,
)

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
LOOK_ALIKES = ("<bos>", "<eos>", "<pad>", "<|user|>", "<|endoftext|>")
_TEXT = st.lists(
    st.one_of(
        st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
        st.sampled_from(LOOK_ALIKES),
    ),
    min_size=1,
    max_size=6,
).map("".join)

#: Runs in the vLLM venv: one JSON request a line in ({text, add_special_tokens}), its ids out.
VLLM_ENCODER = """
import json, sys
from vllm.tokenizers import get_tokenizer
tokenizer = get_tokenizer(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    asked = json.loads(line)
    ids = tokenizer(asked["text"], add_special_tokens=asked["add_special_tokens"])["input_ids"]
    print(json.dumps(list(ids)), flush=True)
"""


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("vllm-tiny-tokenizer")
    save_byte_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def vllm_encoder(tokenizer_dir: Path) -> Iterator[subprocess.Popen[str]]:
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    child = subprocess.Popen(
        [str(vllm_python()), "-c", VLLM_ENCODER, str(tokenizer_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert child.stdout is not None
    while (line := child.stdout.readline()) and line.strip() != "ready":
        pass
    assert line, "the vLLM venv's tokenizer did not load"
    yield child
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=30)


def _vllm_ids(child: subprocess.Popen[str], text: str, add_special_tokens: bool) -> list[int]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(json.dumps({"text": text, "add_special_tokens": add_special_tokens}) + "\n")
    child.stdin.flush()
    return list(json.loads(child.stdout.readline()))


@settings(max_examples=150, deadline=None)
@given(text=_TEXT, add_special_tokens=st.booleans())
def test_completion_prompt_ids_are_vllms(
    tokenizer_dir: Path,
    vllm_encoder: subprocess.Popen[str],
    text: str,
    add_special_tokens: bool,
) -> None:
    ours: ModelTokenizer = load_model_tokenizer(tokenizer_dir)
    ids = ours.prompt_ids(text, add_special_tokens=add_special_tokens, as_chat_turn=False)
    assert ids == _vllm_ids(vllm_encoder, text, add_special_tokens)


def test_a_directory_of_slow_tokenizer_files_is_refused(tmp_path: Path) -> None:
    save_slow_byte_tokenizer(tmp_path)
    with pytest.raises(TokenizerUnavailable, match=r"tokenizer\.json is not readable here"):
        load_model_tokenizer(tmp_path)
