"""Text in, token ids out: a deterministic byte tokenizer for random presets, and a thin
adapter over a checkpoint's own tokenizer (with its chat template).

Random-weight presets have no trained vocabulary, so text maps to its UTF-8 bytes (ids 0-255)
plus three specials. Decoding drops specials and replaces invalid UTF-8, so any id sequence a
random model emits still prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

BYTE_VOCAB_SIZE = 256
PAD_ID = 256
BOS_ID = 257
EOS_ID = 258
#: ids 0-255 are bytes, then <pad>, <bos>, <eos>.
BYTE_TOKENIZER_VOCAB_SIZE = 259


class Tokenizer(Protocol):
    """What the engine needs from a tokenizer."""

    @property
    def eos_token_ids(self) -> frozenset[int]: ...

    def encode_prompt(self, text: str, *, chat: bool) -> list[int]:
        """Token ids of a prompt; `chat` wraps it in the model's chat template, if any."""
        ...

    def encode_text(self, text: str) -> list[int]:
        """The text's own ids: no special tokens, no template (vLLM's
        `add_special_tokens: false`)."""
        ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def token_piece(self, token_id: int) -> tuple[str, bytes]:
        """One token as text and as the bytes it stands for (logprobs name tokens so)."""
        ...


SPECIAL_NAMES = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}


class ByteTokenizer:
    """UTF-8 bytes plus <bos>; the same text always gives the same ids."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS_ID})

    def encode_prompt(self, text: str, *, chat: bool) -> list[int]:
        return [BOS_ID, *self.encode_text(text)]

    def encode_text(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, token_ids: Sequence[int]) -> str:
        data = bytes(t for t in token_ids if 0 <= t < BYTE_VOCAB_SIZE)
        return data.decode("utf-8", errors="replace")

    def token_piece(self, token_id: int) -> tuple[str, bytes]:
        if 0 <= token_id < BYTE_VOCAB_SIZE:
            raw = bytes([token_id])  # a lone byte of a multi-byte character: U+FFFD as text
            return raw.decode("utf-8", errors="replace"), raw
        name = SPECIAL_NAMES.get(token_id, "")
        return name, name.encode()


class HfTokenizer:
    """A checkpoint's tokenizer; prompts go through its chat template when it has one."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    @property
    def eos_token_ids(self) -> frozenset[int]:
        eos = self._tokenizer.eos_token_id
        return frozenset() if eos is None else frozenset({int(eos)})

    def encode_prompt(self, text: str, *, chat: bool) -> list[int]:
        if chat and self._tokenizer.chat_template:
            messages = [{"role": "user", "content": text}]
            rendered = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            return list(self._tokenizer.encode(rendered, add_special_tokens=False))
        return list(self._tokenizer.encode(text))

    def encode_text(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def token_piece(self, token_id: int) -> tuple[str, bytes]:
        text = str(self._tokenizer.decode([token_id], skip_special_tokens=False))
        return text, text.encode("utf-8")


def _byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte (what a byte-level BPE vocabulary holds):
    printable Latin-1 bytes stand for themselves, the rest map to code points from 256 up."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(BYTE_VOCAB_SIZE):
        if b not in chars:
            chars[b] = chr(BYTE_VOCAB_SIZE + extra)
            extra += 1
    return [chars[b] for b in range(BYTE_VOCAB_SIZE)]


def save_byte_tokenizer(directory: Path, chat_template: str | None = None) -> None:
    """`ByteTokenizer` as a Hugging Face tokenizer directory: `AutoTokenizer.from_pretrained`
    on it encodes text as <bos> + its UTF-8 bytes (ids 257, then 0-255) and decodes ids back
    with specials dropped, exactly as the engine does, so clients that count tokens
    (guidellm's `processor`, `vllm bench serve --tokenizer`) count what the server counts.

    A byte-level BPE with no merges: every byte is one token whose id is its value.
    `chat_template` (Jinja) is saved with it: how the server renders a chat into a prompt."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {char: b for b, char in enumerate(_byte_chars())}
    vocab.update({"<pad>": PAD_ID, "<bos>": BOS_ID, "<eos>": EOS_ID})
    backend = Tokenizer(models.BPE(vocab, [], ignore_merges=True))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)]
    )
    wrapper: Any = PreTrainedTokenizerFast  # transformers' tokenizer classes are untyped
    fast = wrapper(
        tokenizer_object=backend,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        model_max_length=2**31 - 1,
        split_special_tokens=True,  # a literal "<bos>" in a prompt is five bytes, as here
    )
    fast.chat_template = chat_template
    fast.save_pretrained(str(directory))
