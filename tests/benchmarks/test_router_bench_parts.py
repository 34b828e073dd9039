"""The router-overhead benchmark's parts, in process: HTTP/1.1 framing over arbitrary splits,
the fixed-cost worker through the load client, the counting proxy's relay and its count of
what came before the first token."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import router_stacks
from counting_proxy import Call, CountingProxy, round_trips
from http1 import chunk, iter_body, read_head
from load_client import Target, completion_body, filler, prompt
from openai_worker import Worker, WorkerCost


def _reader_of(data: bytes, cuts: list[int]) -> asyncio.StreamReader:
    """A reader fed `data` in pieces cut at `cuts`, then EOF."""
    reader = asyncio.StreamReader()
    edges = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(edges):
        reader.feed_data(data[a:b])
    reader.feed_eof()
    return reader


@given(
    pieces=st.lists(st.binary(min_size=1, max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    chunked=st.booleans(),
)
def test_a_body_reads_back_whole_however_it_is_cut(
    pieces: list[bytes], cuts: list[int], chunked: bool
) -> None:
    body = b"".join(pieces)
    if chunked:
        framing, payload = b"transfer-encoding: chunked", b"".join(map(chunk, pieces)) + chunk(b"")
    else:
        framing, payload = b"content-length: %d" % len(body), body
    message = b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n" + payload + b"NEXT"

    async def read() -> tuple[int, bytes, bytes]:
        reader = _reader_of(message, cuts)
        head = await read_head(reader)
        assert head is not None
        got = b"".join([p async for p in iter_body(reader, head, is_response=True)])
        return head.status, got, await reader.read()

    assert asyncio.run(read()) == (200, body, b"NEXT")  # keep-alive: the next message intact


async def _serve_worker(cost: WorkerCost) -> asyncio.Server:
    return await asyncio.start_server(Worker("m", cost).serve, "127.0.0.1", 0)


def test_the_worker_streams_max_tokens_and_the_client_times_the_first() -> None:
    async def run() -> list[object]:
        server = await _serve_worker(WorkerCost(0.0, 0.0))
        target = Target("127.0.0.1", server.sockets[0].getsockname()[1])
        body = completion_body("m", prompt(64, 1, filler(64)), 5)
        outcomes = [await target.complete(body) for _ in range(3)]  # one kept-alive connection
        target.close()
        server.close()
        return outcomes

    outcomes = asyncio.run(run())
    assert [o.status for o in outcomes] == [200, 200, 200]  # type: ignore[attr-defined]
    assert all(o.is_ok and o.ttft_s <= o.e2e_s for o in outcomes)  # type: ignore[attr-defined]


def test_a_connection_the_server_closed_while_idle_is_not_an_outcome() -> None:
    """A server that closes every connection after one response (without saying so, as an
    idle timeout does): each request after the first finds its kept-alive connection dead
    and goes again on a new one."""
    answer = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
        b"\r\n\r\n" + chunk(b'data: {"choices": [{"text": " a"}]}\n\n') + chunk(b"")
    )

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await read_head(reader)
        assert head is not None
        [p async for p in iter_body(reader, head)]
        writer.write(answer)
        await writer.drain()
        writer.close()

    async def run() -> list[object]:
        server = await asyncio.start_server(once, "127.0.0.1", 0)
        target = Target("127.0.0.1", server.sockets[0].getsockname()[1])
        outcomes = []
        for _ in range(3):
            outcomes.append(await target.complete(b"{}"))
            await asyncio.sleep(0.05)  # the server's close reaches the pooled connection
        target.close()
        server.close()
        return outcomes

    assert [o.is_ok for o in asyncio.run(run())] == [True, True, True]  # type: ignore[attr-defined]


def test_prompts_are_unique_in_their_first_characters_and_of_the_length_asked() -> None:
    text = filler(2000)
    a, b = prompt(1024, 1, text), prompt(1024, 2, text)
    assert len(a) == len(b) == 1024
    assert a[0:9] != b[0:9] and a[9:] == b[9:]
    assert json.loads(completion_body("m", a, 16))["stream"] is True


def test_the_proxy_relays_unchanged_and_counts_each_call() -> None:
    async def run() -> tuple[list[Call], list[object]]:
        server = await _serve_worker(WorkerCost(0.0, 0.0))
        proxy = CountingProxy("w", server.sockets[0].getsockname()[1])
        await proxy.start()
        target = Target("127.0.0.1", proxy.port)
        body = completion_body("m", prompt(300, 7, filler(300)), 4)
        outcomes = [await target.complete(body), await target.complete(body)]
        target.close()
        await proxy.stop()
        server.close()
        return proxy.calls, outcomes

    calls, outcomes = asyncio.run(run())
    assert all(o.is_ok for o in outcomes)  # type: ignore[attr-defined]
    assert [(c.method, c.path) for c in calls] == [("POST", "/v1/completions")] * 2
    body_bytes = len(completion_body("m", prompt(300, 7, filler(300)), 4))
    assert all(c.sent_bytes > body_bytes for c in calls)  # the head and the whole body
    assert all(c.ended_s is not None and sum(n for _, n in c.received) > 0 for c in calls)


def test_round_trips_count_requests_calls_before_the_first_token() -> None:
    calls = [
        Call("a", "GET", "/state?since=3", 10.1, 100, [(10.2, 50)], 10.2),  # polling: left out
        Call("a", "POST", "/tokenize", 10.0, 1000, [(10.1, 4000)], 10.1),
        Call("b", "POST", "/cached", 10.2, 4000, [(10.3, 20)], 10.3),
        Call("c", "POST", "/prefill", 10.25, 4000, [(10.4, 300)], 10.4),  # overlaps /cached
        Call("d", "POST", "/decode", 10.5, 4000, [(10.6, 200), (10.8, 200)], None),
        Call("a", "POST", "/tokenize", 11.0, 9, [(11.1, 9)], 11.1),  # after: another request
    ]
    got = round_trips(calls, sent_at_s=10.0, first_token_at_s=10.7)
    assert got["calls"] == 4
    assert got["sequential_round_trips"] == 3  # tokenize; cached + prefill; decode
    assert got["bytes_to_instances"] == 13000
    assert got["bytes_from_instances"] == 4000 + 20 + 300 + 200  # decode's second piece came after


def test_peers_without_their_venv_are_reported_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_stacks, "PEER_VENV", tmp_path / "absent")
    monkeypatch.setattr(router_stacks, "REPO_ROOT", tmp_path)
    reason = router_stacks.ensure_peer_venv(bootstrap=False)
    assert reason is not None and "absent" in reason
    assert not (tmp_path / "absent").exists()
