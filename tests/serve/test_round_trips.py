"""Issue 25 point 4: the router's calls to instances before a request's first token.

A PD-P request without a cache move, on instances whose prompts the router can encode
(`/info` capabilities `byte_tokenizer`: emulated; torch's presets, which also answer `/cached`):
counted at the router's transport, it makes two calls before the first token, one after the
other: `/prefill`, then `/decode`. There were three (`/tokenize` first) and four with
`/cached` on a decode instance that reports its cache. The prompt's ids cross the wire in
those two bodies only, packed (`protocol.TokenIds`), and in `/prefill` alone when both
instances take the prompt with the KV (`prompt_in_kv_stream`). The same request through the
in-process `FakeInstanceClient` makes the same two calls.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from fake_instances import FakeInstanceClient, fake_deployment
from pydantic import BaseModel
from serve_helpers import fake_info

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment
from prfaas.serve.json_lines import json_line
from prfaas.serve.router.flow import RouterRuntime, generate
from prfaas.serve.router.instance_client import HttpInstanceClient, InstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

PROMPT = "a prompt the PD-P path takes " * 2
SAMPLING = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0, ignore_eos=True)


def _runtime(
    deployment: Deployment,
    client: InstanceClient,
    *,
    reports_cache: bool,
    prompt_in_kv_stream: frozenset[str] = frozenset(),
) -> RouterRuntime:
    """A router over instances whose `/info` says `byte_tokenizer`, `moves_prefixes` as
    `reports_cache`, and `prompt_in_kv_stream` for the instances named there."""
    registry = Registry(deployment, client)
    for inst in registry.instances.values():
        info = fake_info(inst.name, inst.role.value)
        capabilities = info.capabilities.model_copy(
            update={
                "byte_tokenizer": True,
                "moves_prefixes": reports_cache,
                "prompt_in_kv_stream": inst.name in prompt_in_kv_stream,
            }
        )
        update = {"capabilities": capabilities, "vocab_size": 259}
        inst.info, inst.is_healthy = info.model_copy(update=update), True
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


async def _until_first_token(rt: RouterRuntime) -> str:
    """Run one request until its first token; the path it took."""
    tokens = await rt.prompts.encode(PROMPT)
    path = ""
    items = generate(rt, tokens, SAMPLING)
    async for item in items:
        if not isinstance(item, p.DecodeChunk):
            path = item.decision.path.value
            continue
        await items.aclose()
        break
    return path


class Counting:
    """Instances behind a counting transport: each call's path and body, in order, and how
    many had been made when the decode stream's first token left the instance."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.before_first_token: int | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.calls.append((request.url.path, request.content))
        path = request.url.path
        if path == "/tokenize":
            return _json(p.TokenizeResult(token_ids=p.byte_prompt_ids(PROMPT)))
        if path == "/cached":
            return _json(p.CachedResult(tokens=0))
        if path == "/prefill":
            rid = json.loads(request.content)["request_id"]
            done = p.PrefillResult(
                request_id=rid,
                first_token=97,
                hit_tokens=0,
                kv_bytes=1,
                num_slices=1,
                prefill_s=0.0,
                transfer_s=0.0,
            )
            return _json(done)
        if path == "/decode":
            self.before_first_token = len(self.calls)
            lines = json_line(p.DecodeChunk(token_id=97, text="a")) + json_line(
                p.DecodeChunk(finish_reason="length", num_completion_tokens=2)
            )
            return httpx.Response(200, content=lines)
        return httpx.Response(200, json={"request_id": "x", "cancelled_call": False})


def _json(body: BaseModel) -> httpx.Response:
    return httpx.Response(200, content=body.model_dump_json())


@pytest.mark.parametrize("reports_cache", [False, True], ids=["emulated", "torch-preset"])
def test_two_sequential_calls_before_the_first_token(reports_cache: bool) -> None:
    counting = Counting()
    deployment = fake_deployment()

    async def run() -> str:
        async with HttpInstanceClient(transport=httpx.MockTransport(counting.handle)) as client:
            return await _until_first_token(
                _runtime(deployment, client, reports_cache=reports_cache)
            )

    assert asyncio.run(run()) == "pd-p"
    assert counting.before_first_token == 2
    assert [path for path, _ in counting.calls[:2]] == ["/prefill", "/decode"]
    packed = p.pack_token_ids(p.byte_prompt_ids(PROMPT)).encode()
    assert [packed in body for _, body in counting.calls[:2]] == [True, True]


@pytest.mark.parametrize(
    ("declared", "in_decode"),
    [("all", False), ("decode only", True), ("none", True)],
)
def test_the_ids_leave_the_router_once_when_both_instances_take_them_with_the_kv(
    declared: str, in_decode: bool
) -> None:
    """`/prefill` always carries the packed ids; `/decode` only when the prompt cannot reach
    the decode instance with the KV (either instance does not declare `prompt_in_kv_stream`:
    vLLM's engine needs them in its own request)."""
    counting = Counting()
    deployment = fake_deployment()
    names = {spec.name for spec in deployment.instances}
    decoders = {spec.name for spec in deployment.instances if not spec.role.is_prefill}
    chosen = {"all": names, "decode only": decoders, "none": set()}[declared]

    async def run() -> str:
        async with HttpInstanceClient(transport=httpx.MockTransport(counting.handle)) as client:
            rt = _runtime(
                deployment, client, reports_cache=False, prompt_in_kv_stream=frozenset(chosen)
            )
            return await _until_first_token(rt)

    assert asyncio.run(run()) == "pd-p"
    (prefill, decode) = [body for _, body in counting.calls[:2]]
    packed = p.pack_token_ids(p.byte_prompt_ids(PROMPT)).encode()
    assert packed in prefill
    assert (packed in decode) is in_decode
    assert (json.loads(decode)["token_ids"] is None) is not in_decode


def test_the_fake_sees_the_same_two_calls() -> None:
    deployment = fake_deployment()
    fake = FakeInstanceClient(deployment)
    rt = _runtime(deployment, fake, reports_cache=True)
    assert asyncio.run(_until_first_token(rt)) == "pd-p"
    assert [c.endpoint for c in fake.calls[:2]] == ["/prefill", "/decode"]
    first, second = fake.calls[:2]  # then /cancel: the test left after the first token
    assert first.ended is not None and first.ended < second.started  # one after the other
