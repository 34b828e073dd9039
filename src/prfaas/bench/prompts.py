"""Prompt synthesis: text of a given token length with a trace's shared-prefix structure.

Mooncake traces carry lengths and `hash_ids`, never text. The benchmark needs real prompts
whose prefixes are identical exactly where the trace says they are, so that a prefix cache on
the server sees the hits the trace implies:

    hash_ids [7, 8, 9], input 1,300 tokens, 512 tokens a block
    -> text(7)[:512] + text(8)[:512] + text(9)[:276]

`text(h)` is drawn from a generator seeded with (seed, h) alone, so an equal id gives an equal
block wherever it appears, and a partial last block is a prefix of the full one. Ids are
chained in Mooncake traces (an equal id at a position implies an equal prefix before it), so
equal leading ids give equal token prefixes. Tokens a trace line has beyond its ids, and every
synthetic prompt, come from a generator seeded with the request's own key (no sharing).

Token lengths are exact only for a byte tokenizer; otherwise approximate (`TokenUnit`):

    byte  one character per token: exact for the byte-level tokenizer of our tiny presets
          (which add one <bos>, so the server counts input + 1 tokens)
    word  one short common English word with a leading space per token: each is a single token
          in GPT-2/Llama/Qwen-style BPE vocabularies, so lengths land within a few percent there

Callers: `bench.arrivals` attaches lengths and ids; `bench.runner` asks for each prompt's text
just before sending it. Blocks are cached (LRU, bounded), since traces reuse ids heavily.
"""

from __future__ import annotations

import enum
import random
from collections import OrderedDict
from collections.abc import Sequence

from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS

#: Short, frequent English words: one BPE token each with a leading space in common vocabularies.
_WORD_TEXT = (
    "the of and to in is for on that with as it at by from this be or are an was we not "
    "can all has but one new more time data will use other some two first each way may "
    "work these than over most only also back after year where state long system world "
    "part good high small large made place case point group number fact hand early"
)
WORDS = tuple(_WORD_TEXT.split())

#: Blocks kept in the LRU cache (512 units each: a few MB at most).
CACHE_BLOCKS = 8192


class TokenUnit(enum.Enum):
    """What one token of a synthesised prompt is (see the module docstring)."""

    BYTE = "byte"
    WORD = "word"


class PromptSynthesizer:
    """Deterministic prompt text for (hash ids, length); see the module docstring."""

    def __init__(
        self, unit: TokenUnit, seed: int = 0, block_tokens: int = MOONCAKE_BLOCK_TOKENS
    ) -> None:
        if block_tokens < 1:
            raise ValueError("block_tokens must be at least 1")
        self.unit = unit
        self.seed = seed
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[int, tuple[str, ...]] = OrderedDict()

    def prompt(self, input_tokens: int, hash_ids: Sequence[int], request_key: str) -> str:
        """`input_tokens` tokens: the blocks of `hash_ids`, then request-unique filler."""
        if input_tokens < 1:
            raise ValueError("a prompt needs at least one token")
        units: list[str] = []
        for hash_id in hash_ids:
            missing = input_tokens - len(units)
            if missing <= 0:
                break
            units.extend(self._shared_block(hash_id)[:missing])
        block_index = 0
        while len(units) < input_tokens:
            key = f"{self.seed}:req:{request_key}:{block_index}"
            units.extend(self._units(key)[: input_tokens - len(units)])
            block_index += 1
        return "".join(units)

    def _shared_block(self, hash_id: int) -> tuple[str, ...]:
        block = self._blocks.get(hash_id)
        if block is None:
            block = self._units(f"{self.seed}:hash:{hash_id}")
            self._blocks[hash_id] = block
            if len(self._blocks) > CACHE_BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(hash_id)
        return block

    def _units(self, key: str) -> tuple[str, ...]:
        """One block of units from a generator seeded by `key` (str seeds are stable)."""
        rng = random.Random(key)
        if self.unit is TokenUnit.WORD:
            return tuple(" " + word for word in rng.choices(WORDS, k=self.block_tokens))
        chars: list[str] = []
        while len(chars) < self.block_tokens:
            chars.extend(rng.choice(WORDS) + " ")
        return tuple(chars[: self.block_tokens])
