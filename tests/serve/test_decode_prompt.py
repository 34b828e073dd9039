"""Where a decode instance's prompt comes from (issue 25 point 4): the `/decode` call's ids, or
the ids that came with the request's KV (`DecodeCall.token_ids` None). One emulated decode
instance in process, its HTTP API driven signed, as the router calls it:

- a call without ids on a backend that does not declare `prompt_in_kv_stream` (vLLM's engine
  needs the ids in its own request) is a 400 naming the field, before any wait;
- a call without ids whose KV came without a prompt fails with one error line that says so;
- a call without ids whose KV never comes fails with the claim's own error line (here the
  request was cancelled first), never a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from serve_helpers import emulated_deployment

from prfaas.serve import protocol as p
from prfaas.serve.auth.control import control_key, signed_headers
from prfaas.serve.instance.app import build_app
from prfaas.serve.instance.runtime import InstanceRuntime, build_runtime
from prfaas.serve.launch.ports import with_held_ports
from prfaas.transfer import RequestId

SECRET = "decode-prompt-test-secret-0123456789"
SAMPLING = p.Sampling(max_tokens=4, temperature=0, top_p=1, top_k=0, seed=0)


@pytest.fixture
def decode() -> Iterator[tuple[TestClient, InstanceRuntime]]:
    deployment, held = with_held_ports(emulated_deployment(secret=SECRET))
    rt = build_runtime(deployment, "pdd-0")
    try:
        with TestClient(build_app(rt), base_url=rt.spec.url) as client:
            yield client, rt
    finally:
        for sock in held:
            sock.close()


def _call(request_id: str, token_ids: list[int] | None = None) -> str:
    body = p.DecodeCall(
        request_id=request_id, token_ids=token_ids, first_token=97, sampling=SAMPLING
    )
    return body.model_dump_json()


def _post_decode(client: TestClient, content: str) -> Any:
    """`POST /decode`, signed for pdd-0 as the router signs it."""
    body = content.encode()
    headers = signed_headers(control_key(SECRET.encode()), "pdd-0", "POST", "/decode", body=body)
    return client.post(
        "/decode", content=body, headers={**headers, "content-type": "application/json"}
    )


def _lines(client: TestClient, content: str) -> list[p.DecodeChunk]:
    answer = _post_decode(client, content)
    assert answer.status_code == 200
    return [p.DecodeChunk.model_validate_json(x) for x in answer.text.splitlines() if x]


def test_without_ids_a_backend_that_needs_them_answers_400(
    decode: tuple[TestClient, InstanceRuntime],
) -> None:
    client, rt = decode
    caps = replace(rt.backend.info.capabilities, prompt_in_kv_stream=False)
    rt.backend.info = replace(rt.backend.info, capabilities=caps)
    answer = _post_decode(client, _call("r1"))
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "token_ids"
    assert "prompt_in_kv_stream" in answer.json()["error"]["message"]


def test_kv_that_came_without_a_prompt_fails_the_call_with_the_reason(
    decode: tuple[TestClient, InstanceRuntime],
) -> None:
    client, rt = decode
    assert rt.kv is not None and rt.claims is not None
    rt.kv.sink.commit(RequestId("r2"))  # a transfer that sent nothing, not even a prompt
    rt.claims.arrived("r2")
    (line,) = _lines(client, _call("r2"))
    assert line.error is not None and "no prompt ids for r2" in line.error


def test_kv_that_never_comes_fails_the_call_with_the_claims_error(
    decode: tuple[TestClient, InstanceRuntime],
) -> None:
    client, rt = decode
    assert rt.claims is not None
    rt.claims.drop("r3")  # the router's /cancel came first
    (line,) = _lines(client, _call("r3"))
    assert line.error is not None and "r3 was cancelled" in line.error


def test_the_prompt_that_came_with_the_kv_is_the_decodes(
    decode: tuple[TestClient, InstanceRuntime],
) -> None:
    """The decode's tokens are the emulated backend's function of the whole prompt: the same
    whether the ids came with the KV or in the call."""
    client, rt = decode
    assert rt.kv is not None and rt.claims is not None
    prompt = p.byte_prompt_ids("a prompt that travelled with its KV")
    streams = []
    for rid, ids in (("r4", None), ("r5", prompt)):
        rt.kv.sink.commit(RequestId(rid))
        rt.claims.arrived(rid, tuple(prompt))
        streams.append(_lines(client, _call(rid, ids)))
    assert streams[0] == streams[1] and streams[0][-1].num_prompt_tokens == len(prompt)
