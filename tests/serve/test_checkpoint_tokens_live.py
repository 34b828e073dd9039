"""Issue 25 point 4, live: a real torch checkpoint's prompts are encoded by the router itself.

Two torch instances (PD-P and PD-D) serve a tiny checkpoint directory (random weights, a
byte-level `tokenizer.json` with a chat template, so completion prompts are one user turn of
it: `prompt_as_chat_turn`); the router runs from a deployment file whose instance ports are
recording relays in front of the real ones. A completion makes no `/tokenize` call (two calls,
`/prefill` then `/decode`, before its first token), and the router's `/tokenize` gives the ids
the instance's own `/tokenize` gives, for prompts and chats.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import recording_relay, stop_all, wait_healthy

from prfaas.engine.models import build_preset
from prfaas.integrations.vllm.tiny import save_byte_tokenizer
from prfaas.serve import protocol as p
from prfaas.serve.auth.control import ControlSigner
from prfaas.serve.config.deployment import free_port, load_deployment, transfer_secret
from prfaas.serve.router.instance_client import HttpInstanceClient

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
NAMES = ("pdp-0", "pdd-0")
ROLES = {"pdp-0": "pd-prefill", "pdd-0": "pd-decode"}
PROMPTS = ("Hello there", "<bos> looks special <|user|>", "ünïcødé 😀\n\t end", " ")
CHATS = (
    [{"role": "system", "content": ""}, {"role": "user", "content": "hi <eos>"}],
    [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
)
START_TIMEOUT_S = 180.0


def _checkpoint(directory: Path) -> Path:
    """A torch-servable checkpoint: a tiny preset's weights (vocabulary 259) and the vLLM
    test checkpoints' byte tokenizer (259 ids, a chat template)."""
    build_preset("tiny-qwen3-next").model.save_pretrained(directory)
    save_byte_tokenizer(directory)
    return directory


def _yaml(model: Path, router_port: int, http: dict[str, int], transfer: dict[str, int]) -> str:
    lines = [
        f"model: {model}",
        "served_model_name: tiny-checkpoint",
        "block_tokens: 16",
        "threshold_tokens: 100000",
        f"router: {{host: 127.0.0.1, port: {router_port}}}",
        "rebalance: {enabled: false}",
        "instances:",
    ]
    for name in NAMES:
        lines.append(
            f"  - {{name: {name}, role: {ROLES[name]}, cluster: pd, backend: torch, "
            f"http_port: {http[name]}, transfer_port: {transfer[name]}, capacity_mib: 64}}"
        )
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, list[bytearray]]]:
    """The router's URL, the instances' deployment file, and what each relay carried."""
    work = tmp_path_factory.mktemp("checkpoint-live")
    model = _checkpoint(work / "tiny-checkpoint")
    http = {n: free_port() for n in NAMES}
    transfer = {n: free_port() for n in NAMES}
    router_port = free_port()
    own = work / "instances.yaml"
    own.write_text(_yaml(model, router_port, http, transfer))
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", secrets.token_hex(24))  # ours, signing
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    instance = [sys.executable, "-m", "prfaas", "instance", str(own), "--name"]
    children = [_start([*instance, n], env) for n in NAMES]
    try:
        for name in NAMES:  # up before its relay: a relay connects to it on every accept
            wait_healthy(f"http://127.0.0.1:{http[name]}", children, START_TIMEOUT_S)
        with contextlib.ExitStack() as stack:
            relays = [stack.enter_context(recording_relay(("127.0.0.1", http[n]))) for n in NAMES]
            routed = work / "router.yaml"
            relayed = {n: port for n, (port, _) in zip(NAMES, relays, strict=True)}
            routed.write_text(_yaml(model, router_port, relayed, transfer))
            router = [sys.executable, "-m", "prfaas", "router", str(routed), "--quiet"]
            children.append(_start(router, env))
            url = f"http://127.0.0.1:{router_port}"
            wait_healthy(url, children, START_TIMEOUT_S)
            yield url, own, [seen for _, seen in relays]
    finally:
        stop_all(children, timeout_s=20)


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_completion_makes_no_tokenize_call(served: tuple[str, Path, list[bytearray]]) -> None:
    url, _, seen = served
    before = [len(s) for s in seen]
    body = {"model": "tiny-checkpoint", "prompt": "Count my calls", "max_tokens": 2}
    answer = httpx.post(url + "/v1/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert sorted(_posted(seen, before)) == ["/decode", "/prefill"]  # no /tokenize first


def _posted(seen: list[bytearray], before: list[int]) -> list[str]:
    """The paths the router POSTed to the instances since `before` (each relay's length)."""
    carried = b"".join(bytes(s[n:]) for s, n in zip(seen, before, strict=True))
    return [path.decode() for path in re.findall(rb"POST (/[a-z_]+) HTTP", carried)]


def _instance_ids(deployment: Path, body: p.TokenizeRequest) -> list[int]:
    """The PD-P instance's own `/tokenize` (signed as the router signs its calls)."""
    d = load_deployment(deployment)

    async def ask() -> list[int]:
        async with HttpInstanceClient(ControlSigner(transfer_secret(d), d)) as client:
            return (await client.tokenize(d.instances[0].url, body)).token_ids

    return asyncio.run(ask())


def test_the_torch_instance_declares_its_prompt_rule(
    served: tuple[str, Path, list[bytearray]],
) -> None:
    """A checkpoint with a chat template: a completion prompt is one user turn of it."""
    d = load_deployment(served[1])

    async def ask() -> p.InstanceInfo:
        async with HttpInstanceClient(ControlSigner(transfer_secret(d), d)) as client:
            return await client.info(d.instances[0].url)

    said = asyncio.run(ask()).capabilities
    assert said.prompt_as_chat_turn and said.tokenizer_from_model_dir
    assert not said.byte_tokenizer and not said.renders_chat


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_the_routers_prompt_ids_are_the_instances(
    served: tuple[str, Path, list[bytearray]], prompt: str, add_special_tokens: bool
) -> None:
    url, deployment, seen = served
    before = [len(s) for s in seen]
    body = {"model": "tiny-checkpoint", "prompt": prompt, "add_special_tokens": add_special_tokens}
    ours = httpx.post(url + "/tokenize", json=body, timeout=30).json()["tokens"]
    assert _posted(seen, before) == []  # no call to an instance (its /state polls aside)
    asked = p.TokenizeRequest(text=prompt, add_special_tokens=add_special_tokens)
    assert ours == _instance_ids(deployment, asked)


@pytest.mark.parametrize("messages", CHATS)
def test_the_routers_chat_ids_are_the_instances(
    served: tuple[str, Path, list[bytearray]], messages: list[dict[str, object]]
) -> None:
    url, deployment, _ = served
    body = {"model": "tiny-checkpoint", "messages": messages}
    ours = httpx.post(url + "/tokenize", json=body, timeout=30).json()["tokens"]
    chat = p.ChatPrompt.model_validate({"messages": messages})
    assert ours == _instance_ids(deployment, p.TokenizeRequest(chat=chat))
