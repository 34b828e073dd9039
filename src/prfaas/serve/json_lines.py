r"""The framing of the instance-to-router decode stream: JSON lines, split at b"\n" only.

    instance POST /decode  ->  {"token_id":97,"text":"a\u2028"}\n{"finish_reason":"stop",...}\n
    router                 <-  one `DecodeChunk` per b"\n"-terminated line

Why a framing of our own and not `httpx.Response.aiter_lines`: that reader splits as
`str.splitlines` does, at \r, \x0b, \x0c, \x1c, \x1d, \x1e, U+0085, U+2028 and U+2029
too. JSON escapes the control characters among them but writes U+0085, U+2028 and U+2029 as
they are, so generated text holding one cut a line in two (issue 26: a JSON completion got
500, a stream stopped without an error or `[DONE]`). A b"\n" byte is a safe delimiter: JSON
escapes a newline inside a string and writes none between tokens here, and no UTF-8
multi-byte sequence contains the byte 0x0A, so the split never depends on the text.

Writers: `instance.stream_decode` (`json_line`). Readers (`split_lines`): `flow._decode`, and
the vLLM backend reading its child's SSE stream (`data: {json}` lines, whose JSON vLLM writes
the same way).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

from pydantic import BaseModel

LINE_END = b"\n"


def json_line(body: BaseModel) -> bytes:
    r"""`body` as one line of the stream: its JSON (fields at their defaults left out) and
    b"\n"."""
    return body.model_dump_json(exclude_defaults=True).encode() + LINE_END


async def split_lines(chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    r"""Each b"\n"-terminated line of the byte stream `chunks`, without its b"\n", however
    the bytes were cut into chunks (a cut may fall inside a UTF-8 character: lines are
    bytes, decoded by their reader). Bytes after the last b"\n" are not a line: a stream
    broken off mid-line ends at its last whole line, and its reader, missing the final
    line, says the stream broke off."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(LINE_END)
        for line in lines:
            yield line
