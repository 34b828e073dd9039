"""Issue 26 item 3: concurrent requests sharing a prefix share one cache move.

The dashboard showed the same 112-token prefix moved from prfaas-0 to pdp-0 ten times at
the same instant: each concurrent request whose decision carried the move started its own.
Here ten decisions with the same `CacheMove` (holder, target, prefix) run at once against
instances played by an `httpx.MockTransport` whose `/prefix/send` holds until every request
has asked: one send and one import happen, every request gets the move's result, nine are
marked `joined`, and `prfaas:cache_moves_total` counts one move.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import cast

import httpx
from serve_helpers import fake_info

from prfaas.scheduler import RouteDecision
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.router.flow import RouterRuntime, _move
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry

PREFIX_TOKENS = 112
NUM_REQUESTS = 10


def _decision(request_id: str) -> RouteDecision:
    move = SimpleNamespace(source_instance_id="prfaas-0", tokens=PREFIX_TOKENS)
    fake = SimpleNamespace(
        request_id=request_id,
        prefill_instance_id="pdp-0",
        decode_instance_id="pdd-0",
        cache_move=move,
    )
    return cast(RouteDecision, fake)


def _sample(rt: RouterRuntime, name: str, labels: dict[str, str] | None = None) -> float:
    return rt.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def test_concurrent_moves_of_one_prefix_to_one_target_are_one_move() -> None:
    calls: list[str] = []
    gate = asyncio.Event()

    async def handle(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        body = json.loads(request.content)
        if request.url.path == "/prefix/send":
            await gate.wait()
            sent = p.PrefixSendResult(
                move_id=body["move_id"], tokens=PREFIX_TOKENS, kv_bytes=4096, num_slices=1
            )
            return httpx.Response(200, content=sent.model_dump_json())
        hit = p.PrefixImportResult(move_id=body["move_id"], hit_tokens=PREFIX_TOKENS)
        return httpx.Response(200, content=hit.model_dump_json())

    async def run() -> list[dict[str, object]]:
        deployment = default_deployment()
        client = HttpInstanceClient(transport=httpx.MockTransport(handle))
        registry = Registry(deployment, client)
        for inst in registry.instances.values():
            inst.info, inst.is_healthy = fake_info(inst.name, "pd-prefill"), True
        rt = RouterRuntime(deployment, registry, RouterMetrics(), client)
        prompts = [[7] * PREFIX_TOKENS + [k] * 50 for k in range(NUM_REQUESTS)]
        moves = [
            asyncio.create_task(_move(rt, _decision(f"cmpl-{k}"), tokens))
            for k, tokens in enumerate(prompts)
        ]
        while not calls:  # every move task ran up to its wait before the first send
            await asyncio.sleep(0)
        gate.set()
        out = await asyncio.gather(*moves)
        assert _sample(rt, "prfaas:cache_moves_total", {"status": "done"}) == 1
        assert _sample(rt, "prfaas:cache_move_joins_total") == NUM_REQUESTS - 1
        again = await _move(rt, _decision("cmpl-later"), prompts[0])  # none in flight now
        assert "joined" not in again
        return out

    out = asyncio.run(run())
    assert calls.count("/prefix/send") == 2 and calls.count("/prefix/import") == 2
    assert all(o["status"] == "done" and o["hit_tokens"] == PREFIX_TOKENS for o in out)
    assert sum(bool(o.get("joined")) for o in out) == NUM_REQUESTS - 1
