"""The instance shell calls its backend's tokenizer verbs off the event loop (issue 25 point
4: the vLLM backend's `/tokenize` is a blocking HTTP call to its child). A backend whose
`encode` blocks until released leaves the instance answering `/state` meanwhile; before,
the whole process stalled until the call returned."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import httpx
import pytest
from fake_instances import fake_deployment

from prfaas.serve import protocol as p
from prfaas.serve.auth.control import ControlSigner
from prfaas.serve.config.deployment import transfer_secret
from prfaas.serve.instance.app import build_app
from prfaas.serve.instance.runtime import build_runtime

HOLD_S = 20.0  # how long the blocked verb waits at most (a stalled loop never releases it)


def _blocking(release: threading.Event, verb: Callable[..., object]) -> Callable[..., object]:
    def blocked(*args: object, **kwargs: object) -> object:
        release.wait(HOLD_S)
        return verb(*args, **kwargs)

    return blocked


@pytest.mark.parametrize("verb", ["encode", "encode_chat", "detokenize"])
def test_a_blocking_tokenizer_verb_leaves_the_instance_answering(
    monkeypatch: pytest.MonkeyPatch, verb: str
) -> None:
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", "thread-test-secret-0123456789")
    deployment = fake_deployment()  # instance ports that name them (no socket is bound)
    rt = build_runtime(deployment, "pdp-0")
    release = threading.Event()
    monkeypatch.setattr(rt.backend, verb, _blocking(release, getattr(rt.backend, verb)))
    chat = p.ChatPrompt.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    calls = {
        "encode": ("/tokenize", p.TokenizeRequest(text="hello")),
        "encode_chat": ("/tokenize", p.TokenizeRequest(chat=chat)),
        "detokenize": ("/detokenize", p.TokenizeResult(token_ids=[104, 105])),
    }
    path, body = calls[verb]
    order: list[str] = []

    async def run() -> None:
        transport = httpx.ASGITransport(app=build_app(rt))
        auth = ControlSigner(transfer_secret(deployment), deployment)
        async with httpx.AsyncClient(transport=transport, base_url=rt.spec.url, auth=auth) as c:

            async def blocked() -> None:
                answer = await c.post(path, json=body.model_dump(mode="json"))
                assert answer.status_code == 200, answer.text
                order.append(path)

            async def state() -> None:
                answer = await c.get("/state")
                assert answer.status_code == 200, answer.text
                order.append("/state")
                release.set()

            await asyncio.gather(blocked(), state())

    asyncio.run(run())
    assert order == ["/state", path]
