"""Text in, token ids out: a deterministic byte tokenizer for random presets, and a thin
adapter over a checkpoint's own tokenizer (with its chat template).

Random-weight presets have no trained vocabulary, so text maps to its UTF-8 bytes (ids 0-255)
plus three specials. Decoding drops specials and replaces invalid UTF-8, so any id sequence a
random model emits still prints.
"""

from __future__ import annotations

from collections.abc import Sequence
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

    def decode(self, token_ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes plus <bos>; the same text always gives the same ids."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return frozenset({EOS_ID})

    def encode_prompt(self, text: str, *, chat: bool) -> list[int]:
        return [BOS_ID, *text.encode("utf-8")]

    def decode(self, token_ids: Sequence[int]) -> str:
        data = bytes(t for t in token_ids if 0 <= t < BYTE_VOCAB_SIZE)
        return data.decode("utf-8", errors="replace")


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

    def decode(self, token_ids: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))
