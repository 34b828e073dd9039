"""Issue 26: a streamed decode says exactly what the non-streamed answer says.

The instance's `stream_decode` is driven by a fake engine that behaves as the torch and
emulated ones do (`engine.Engine._emit`, `serve.backends.emulated._emit`): each token is handed over
first, then the engine prints all ids (the byte tokenizer: invalid UTF-8 as U+FFFD), cuts the
print at each stop string in turn, and finishes. The property, over arbitrary bytes and stop
strings: the streamed deltas join to the final text, and no streamed prefix ever holds a
stop string or a character the final text does not have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.kvcache import KvSlice
from prfaas.serve import protocol as p
from prfaas.serve.backends.interface import Finished, Item, Token
from prfaas.serve.instance.runtime import Activity, stream_decode
from prfaas.serve.instance.stream_text import StreamedText
from prfaas.serve.json_lines import split_lines


def _print(ids: Sequence[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


class FakeEngine:
    """An engine that generates `output` (byte ids) with the torch engine's stop rule; the
    shell has no KV endpoints (`claims` None), so it waits for no transfer."""

    def __init__(self, output: bytes) -> None:
        self.output = output

    def decode(
        self, loop: asyncio.AbstractEventLoop, body: p.DecodeRequest, slices: Sequence[KvSlice]
    ) -> asyncio.Queue[Item]:
        out: asyncio.Queue[Item] = asyncio.Queue()
        generated: list[int] = []
        for token in [body.first_token, *self.output]:
            generated.append(token)
            out.put_nowait(Token(token))
            text, reason = _print(generated), None
            for stop in body.sampling.stop:
                cut = text.find(stop)
                if cut >= 0:
                    text, reason = text[:cut], "stop"
            if reason is None and len(generated) >= body.sampling.max_tokens:
                reason = "length"
            if reason is not None:
                out.put_nowait(Finished(len(body.token_ids), tuple(generated), text, reason))
                break
        return out

    def detokenize(self, ids: Sequence[int]) -> str:
        return _print(ids)

    def cancel(self, request_id: str) -> None:
        raise AssertionError("a finished request is not cancelled")


def _stream(output: bytes, stops: list[str]) -> list[p.DecodeChunk]:
    """The chunks `stream_decode` sends for a request that generates `output`."""
    rt: Any = SimpleNamespace(backend=FakeEngine(output[1:]), activity=Activity(), claims=None)
    sampling = p.Sampling(
        max_tokens=len(output), temperature=0, top_p=1, top_k=0, seed=0, stop=stops
    )
    body = p.DecodeCall(request_id="r", token_ids=[1], first_token=output[0], sampling=sampling)

    async def run() -> list[p.DecodeChunk]:
        lines = split_lines(stream_decode(rt, body))
        return [p.DecodeChunk.model_validate_json(line) async for line in lines]

    return asyncio.run(run())


STOP = st.text(st.sampled_from("ab\u00e9\u20ac\ufffd\n"), min_size=1, max_size=3)
OUTPUT = st.binary(min_size=1, max_size=24) | st.text(
    st.sampled_from("ab\u00e9\u20ac\U0001f600\n"), min_size=1, max_size=12
).map(str.encode)


@settings(max_examples=400, deadline=None)
@given(output=OUTPUT, stops=st.lists(STOP, max_size=3))
def test_the_streamed_text_is_the_final_text_and_never_more(
    output: bytes, stops: list[str]
) -> None:
    chunks = _stream(output, stops)
    final = chunks[-1]
    assert final.finish_reason is not None and final.full_text is not None
    streamed = ""
    for chunk in chunks:
        streamed += chunk.text
        assert final.full_text.startswith(streamed)
        assert not any(stop in streamed for stop in stops)
    assert streamed == final.full_text


def test_the_issues_case_stops_before_the_stop_string() -> None:
    """`"stop": ["m"]` on bytes that print U+FFFD twice then `m` (issue 26's stream)."""
    chunks = _stream(b"\xe2\x28\xffmore", ["m"])
    assert [c.text for c in chunks] == ["", "\ufffd(", "", "\ufffd", ""]
    assert chunks[-1].full_text == "\ufffd(\ufffd" and chunks[-1].finish_reason == "stop"


def test_an_unfinished_character_waits_for_its_last_byte() -> None:
    chunks = _stream("a\u20ac".encode(), [])
    assert [c.text for c in chunks] == ["a", "", "", "\u20ac", ""]


def test_the_possible_start_of_a_stop_string_is_held_until_decided() -> None:
    text = StreamedText(["abc"])
    assert [text.settle(s) for s in ("x", "xa", "xab", "xabd", "xabde")] == ["", "", "x", "a", "b"]
    assert text.rest("xabde") == "de"
    assert StreamedText(["abc"]).rest("x") == "x"
