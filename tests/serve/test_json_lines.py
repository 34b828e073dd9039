"""Issue 26: the instance-to-router decode stream is framed so that no text can break it.

Generated text may hold every character `str.splitlines` splits at (\\n \\r \\x0b \\x0c \\x1c
\\x1d \\x1e U+0085 U+2028 U+2029); JSON writes U+0085, U+2028 and U+2029 as they are, so a
reader splitting like `splitlines` (httpx's `aiter_lines`) cut a chunk in two. The property:
any chunks, written with `json_line` and cut into arbitrary pieces, read back whole with
`split_lines`. Then the router's reader (`flow._decode`) over an `httpx.MockTransport`
instance whose stream holds every separator, in pieces cut inside UTF-8 characters.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import cast

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.scheduler import RouteDecision
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.json_lines import json_line, split_lines
from prfaas.serve.router.attempts import RequestFailed
from prfaas.serve.router.flow import RouterRuntime, _decode
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

SEPARATORS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
TEXT = st.text(
    st.sampled_from(SEPARATORS) | st.characters(codec="utf-8", exclude_categories=("Cs",)),
    max_size=12,
)
CHUNKS = st.lists(
    st.builds(
        p.DecodeChunk,
        token_id=st.none() | st.integers(0, 2**31 - 1),
        text=TEXT,
        finish_reason=st.none() | st.sampled_from(["stop", "length"]),
        full_text=st.none() | TEXT,
        error=st.none() | TEXT,
    ),
    max_size=8,
)


async def _pieces(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    """`data` cut at `cuts` (anywhere: inside a line, inside a UTF-8 character)."""
    edges = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    for start, end in itertools.pairwise(edges):
        yield data[start:end]


async def _read(data: bytes, cuts: list[int]) -> list[bytes]:
    return [line async for line in split_lines(_pieces(data, cuts))]


@settings(max_examples=300, deadline=None)
@given(chunks=CHUNKS, cuts=st.lists(st.integers(0, 10_000), max_size=10))
def test_any_text_survives_the_framing_cut_anywhere(
    chunks: list[p.DecodeChunk], cuts: list[int]
) -> None:
    data = b"".join(json_line(chunk) for chunk in chunks)
    lines = asyncio.run(_read(data, cuts))
    assert [p.DecodeChunk.model_validate_json(line) for line in lines] == chunks


@given(chunks=CHUNKS.filter(bool), keep=st.integers(1, 10_000))
def test_a_stream_broken_off_mid_line_ends_at_its_last_whole_line(
    chunks: list[p.DecodeChunk], keep: int
) -> None:
    lines = [json_line(chunk) for chunk in chunks]
    whole = b"".join(lines[:-1])
    broken = whole + lines[-1][: keep % len(lines[-1])]  # the last line without its b"\n"
    assert asyncio.run(_read(broken, [])) == [line[:-1] for line in lines[:-1]]


# --- the router's reader -------------------------------------------------------------------


def _runtime(decode_body: bytes, cut_every: int) -> RouterRuntime:
    """A router whose decode instance answers `decode_body`, sent in `cut_every`-byte pieces."""

    async def body() -> AsyncIterator[bytes]:
        for start in range(0, len(decode_body), cut_every):
            yield decode_body[start : start + cut_every]

    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/decode"
        return httpx.Response(200, content=body())

    deployment = default_deployment()
    client = HttpInstanceClient(transport=httpx.MockTransport(handle))
    registry = Registry(deployment, client)
    for inst in registry.instances.values():
        inst.is_healthy = True
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


def _decoded(rt: RouterRuntime) -> list[p.DecodeChunk]:
    names = list(rt.registry.instances)
    decision = cast(
        RouteDecision,
        SimpleNamespace(prefill_instance_id=names[0], decode_instance_id=names[-1], request_id="r"),
    )
    prefilled = p.PrefillResult(
        request_id="r",
        first_token=1,
        hit_tokens=0,
        kv_bytes=0,
        num_slices=0,
        prefill_s=0.0,
        transfer_s=0.0,
    )
    sampling = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)

    async def read() -> list[p.DecodeChunk]:
        return [c async for c in _decode(rt, decision, [1, 2], prefilled, sampling)]

    return asyncio.run(read())


@pytest.mark.parametrize("cut_every", [1, 2, 3, 7, 4096])
def test_the_router_reads_text_with_every_line_separator_whole(cut_every: int) -> None:
    pieces = ["a", *SEPARATORS, "\u20ac", "b"]
    chunks = [p.DecodeChunk(token_id=i, text=text) for i, text in enumerate(pieces)]
    final = p.DecodeChunk(
        finish_reason="length", num_completion_tokens=len(pieces), full_text="".join(pieces)
    )
    body = b"".join(json_line(chunk) for chunk in [*chunks, final])
    assert _decoded(_runtime(body, cut_every)) == [*chunks, final]


def test_a_line_that_is_no_chunk_fails_the_attempt_not_the_router() -> None:
    body = json_line(p.DecodeChunk(token_id=1, text="a"))[:-3] + b"\n"
    with pytest.raises(RequestFailed, match="not a DecodeChunk line"):
        _decoded(_runtime(body, 4096))
