r"""The text an instance streams while it decodes: never a character the final text lacks.

The torch and emulated engines hand the instance each token before they decide whether it
ended the request (`Token`, then `Finished` with the final text: the decoded ids cut where
the first stop string starts), and the instance prints the ids decoded so far. Streaming
that print as it grows leaked a stop string the final text cuts off, and U+FFFD that the
next byte would have completed (issue 26: `"stop": ["m"]` streamed `"\ufffd\ufffdm"`
where the JSON answer stopped before the `m`). So a delta is only the part of the print
that is decided:

    stop strings ["mn"]        print "ab\ufffd"   print "ab\ufffdm"   print "ab\ufffdmn"
    1. trailing U+FFFD held    "ab"              "ab\ufffdm"         "ab\ufffdmn"
    2. cut at the first stop   "ab"              "ab\ufffdm"         "ab\ufffd"
    3. longest stop - 1 held   "a"               "ab\ufffd"          "ab"
    delta streamed             "a"               "b\ufffd"           "" (then Finished)

What is streamed is then always a prefix of the final text (a stop occurrence that starts
in the streamed part would be complete inside the print, or start in the held tail), so the
final chunk adds the rest (`rest`) and the streamed text equals the JSON answer's. A backend
that makes its text itself (vLLM: `backends.vllm.text`, which holds back the same way)
hands its deltas over as they are (`append`).
"""

from __future__ import annotations

from collections.abc import Sequence

UNFINISHED = "\ufffd"  # what a decoder prints for bytes that do not (yet) make a character


class StreamedText:
    """The deltas of one request's streamed text (see the module docstring)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._hold_chars = max((len(stop) for stop in stops), default=1) - 1
        self.sent = ""

    def settle(self, printed: str) -> str:
        """The delta to stream now that the ids so far print as `printed` ("" while the
        decided part does not extend what was sent: a tokenizer that re-spaces earlier
        text waits for the final chunk)."""
        decided = printed.rstrip(UNFINISHED)
        starts = [decided.find(stop) for stop in self._stops]
        decided = decided[: min((s for s in starts if s >= 0), default=len(decided))]
        decided = decided[: max(0, len(decided) - self._hold_chars)]
        if len(decided) <= len(self.sent) or not decided.startswith(self.sent):
            return ""
        delta, self.sent = decided[len(self.sent) :], decided
        return delta

    def append(self, delta: str) -> str:
        """A delta the backend decided itself, streamed as it is."""
        self.sent += delta
        return delta

    def rest(self, final: str) -> str:
        """What the final chunk adds: the final text after what was streamed."""
        return final[len(self.sent) :] if final.startswith(self.sent) else ""
