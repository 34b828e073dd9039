"""One contract for the router's instance clients: `HttpInstanceClient` over real emulated
instance processes and the in-process `FakeInstanceClient` answer the same calls alike
(typed results, `CallRefused` for a refusal, `CallBroke` for an instance that is not there)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest
from fake_instances import FakeInstanceClient, fake_deployment
from serve_helpers import emulated_deployment, running

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment
from prfaas.serve.json_lines import split_lines
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.router.instance_client import (
    CallBroke,
    CallRefused,
    HttpInstanceClient,
    InstanceClient,
)

SAMPLING = p.Sampling(max_tokens=3, temperature=0, top_p=1, top_k=0, seed=0, ignore_eos=True)


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    with running(emulated_deployment(time_factor=1e-6), timeout_s=120) as launcher:
        yield launcher


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def _contract(client: InstanceClient, deployment: Deployment) -> None:
    pdp, pdd = deployment.instance("pdp-0"), deployment.instance("pdd-0")
    info = await client.info(pdp.url)
    assert (info.name, info.role, info.capabilities.byte_tokenizer) == ("pdp-0", "pd-prefill", True)
    assert (await client.state(pdp.url, 0, timeout_s=10)).boot_id == info.boot_id
    said = await client.tokenize(pdp.url, p.TokenizeRequest(text="hé"))
    assert said.token_ids == p.byte_prompt_ids("hé")
    assert (await client.detokenize(pdp.url, said)).text == "hé"
    prompt = p.byte_prompt_ids("the contract of one request " * 4)
    body = p.PrefillRequest(
        request_id="cmpl-contract",
        token_ids=prompt,
        sampling=SAMPLING,
        decode_transfer_host=pdd.host,
        decode_transfer_port=pdd.transfer_port,
    )
    done = await client.prefill(pdp.url, body, timeout_s=30)
    assert done.request_id == "cmpl-contract"
    ask = p.DecodeCall(
        request_id="cmpl-contract",
        token_ids=prompt,
        first_token=done.first_token,
        sampling=SAMPLING,
    )
    async with client.decode(pdd.url, ask, timeout_s=30) as stream:
        chunks = [p.DecodeChunk.model_validate_json(line) async for line in split_lines(stream)]
    assert chunks[-1].finish_reason == "length"
    assert chunks[-1].num_completion_tokens == SAMPLING.max_tokens
    gone = await client.cancel(pdd.url, p.CancelRequest(request_id="cmpl-none"), timeout_s=5)
    assert gone == p.CancelResult(request_id="cmpl-none", cancelled_call=False)
    with pytest.raises(CallRefused) as refused:
        async with client.decode(pdp.url, ask, timeout_s=30) as stream:
            pass
    assert refused.value.status_code == 400
    assert "not a decode instance" in refused.value.message


async def _no_answer(client: InstanceClient, url: str) -> None:
    """A call to an instance that is not there breaks (`CallBroke`, not a timeout)."""
    with pytest.raises(CallBroke) as broke:
        await client.info(url)
    assert not broke.value.is_timeout and not broke.value.is_pool_wait


@pytest.mark.e2e
def test_the_http_client_keeps_the_contract(launcher: Launcher) -> None:
    async def run() -> None:
        async with HttpInstanceClient(launcher.instance_auth()) as client:
            await _contract(client, launcher.deployment)
        async with HttpInstanceClient() as unsigned:  # the signer knows no closed port
            await _no_answer(unsigned, _closed_url())

    asyncio.run(run())


def test_the_fake_keeps_the_contract() -> None:
    deployment = fake_deployment()
    asyncio.run(_contract(FakeInstanceClient(deployment), deployment))
    down = deployment.instance("pdp-0").url
    asyncio.run(_no_answer(FakeInstanceClient(deployment, down={down}), down))
