"""A disaggregated request's output text, made as `vllm serve` alone would make it.

The decode child sees the prefill's first token as the last prompt token, so its own text
cannot be joined to the first token's: vLLM primes its incremental detokenizer with the
prompt, and a prompt that ends inside a UTF-8 character (a byte-level first token) makes it
print the whole prompt again. So the instance shell detokenizes the output itself, with
vLLM's algorithm (v1 `FastIncrementalDetokenizer` and `check_stop_strings`, vLLM 0.32): a
`tokenizers` `DecodeStream` primed with the prompt ids, special tokens skipped, a token that
ended the request by EOS or a stop token id left out of the text, and each stop string
searched for only in the text the newest token added plus the stop's length, the earliest
to complete winning, the text cut where it starts. Streamed, the text goes out as vLLM's
does (`get_next_output_text` with `delta`): the last (longest stop - 1) characters are held
back until the request ends, so no prefix of a stop string reaches a client that the end
would cut off.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from prfaas.serve.errors import BadRequestError

INVALID_PREFIX = "Invalid prefix encountered"  # tokenizers' DecodeStream, vLLM issue 17448


def load_tokenizer(model_dir: Path, converted: str | None = None) -> Tokenizer:
    """The fast tokenizer vLLM detokenizes with: the model's `tokenizer.json`, else
    `converted`, the one transformers converted from a slow tokenizer's files inside the
    vLLM venv (`prfaas.integrations.vllm.probe`: transformers is not this venv's,
    docs/architecture.md walls). A model directory with neither is refused when the instance
    starts."""
    path = model_dir / "tokenizer.json"
    try:
        if converted is not None and not path.exists():
            return Tokenizer.from_str(converted)
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises a plain Exception for a bad file
        raise BadRequestError(
            f"backend vllm: needs the model's fast tokenizer at {path}: {err}"
        ) from None


class OutputText:
    """The output text of one request, token by token (see the module docstring)."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int], stops: Sequence[str]):
        self._tokenizer = tokenizer
        self._stream = DecodeStream(ids=list(prompt_ids), skip_special_tokens=True)
        self._stops = list(stops)
        self._hold_chars = max((len(stop) for stop in stops), default=1) - 1
        self._sent_chars = 0
        self.text = ""
        self.stopped_by: str | None = None  # the stop string that ended the request

    def add(self, token_id: int) -> bool:
        """Print the next token; True when a stop string completed (the text is cut)."""
        piece = self._step(token_id) or ""
        self.text += piece
        if not piece or not self._stops:
            return False
        best_end, best_start = len(self.text) + 1, -1
        for stop in self._stops:
            start = self.text.find(stop, max(0, len(self.text) - len(piece) - len(stop) + 1))
            if start >= 0 and start + len(stop) < best_end:
                best_end, best_start, self.stopped_by = start + len(stop), start, stop
        if best_start < 0:
            return False
        self.text = self.text[:best_start]
        return True

    def delta(self, *, finished: bool = False) -> str:
        """The text not streamed yet, less the held-back tail while the request runs."""
        end = len(self.text) if finished else len(self.text) - self._hold_chars
        if end <= self._sent_chars:
            return ""
        piece, self._sent_chars = self.text[self._sent_chars : end], end
        return piece

    def _step(self, token_id: int) -> str | None:
        try:
            return self._stream.step(self._tokenizer, token_id)
        except Exception as err:  # tokenizers raises a plain Exception here
            if not str(err).startswith(INVALID_PREFIX):
                raise
            self._stream = DecodeStream(skip_special_tokens=True)  # vLLM resets the same way
            return self._stream.step(self._tokenizer, token_id)
