"""Issue 25 point 4: a prompt's token ids leave the router once.

Real processes on loopback: the instances and the router of one deployment, the router calling
the decode instance through a recording relay (`serve_helpers.recording_relay`: every byte the
router sent it). On backends that declare `prompt_in_kv_stream` (emulated, torch) the prefill
instance sends the prompt's ids in the request's KV stream (the transfer layer's PROMPT frame)
and the router's `/decode` carries none: a 100K-token prompt's ids (533 KB packed) are not in
the bytes the decode instance got from the router, and its `/decode` bodies stay a few hundred
bytes. The completion is what the prompt makes (the emulated backend's tokens are a function of
the whole prompt, `output_token`), and on torch a decode instance that already holds the
prompt's prefix (the second request: `from_token` > 0) still gets the whole prompt.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from serve_helpers import emulated_deployment, recording_relay, stop_all, wait_healthy

from prfaas.serve import protocol as p
from prfaas.serve.auth.control import ControlSigner
from prfaas.serve.backends.emulated import output_token
from prfaas.serve.config.deployment import (
    ADMIN_TOKEN_ENV_VAR,
    Deployment,
    RouterSpec,
    child_environment,
    default_deployment,
)
from prfaas.serve.launch.ports import with_held_ports
from prfaas.transfer.config import SECRET_ENV_VAR

pytestmark = pytest.mark.e2e

START_TIMEOUT_S = 180.0  # a bound for a loaded host
MAX_TOKENS = 8


ADMIN = {"Authorization": "Bearer admin-token-of-the-relay-test"}


@dataclass
class Relayed:
    """A running deployment whose router calls one instance through a recording relay."""

    plan: Deployment
    url: str  # the router's
    seen: bytearray  # what the router sent the relayed instance (growing as it goes)
    signer: ControlSigner  # signs calls to the instances as the router does

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", timeout=120)


@contextlib.contextmanager
def relayed(plan: Deployment, name: str) -> Iterator[Relayed]:
    """`plan`'s instances and router as processes, the router calling instance `name`
    through a recording relay: the router's own file names the relay's port for `name` (the
    control signature names the instance, not its port)."""
    plan, held = with_held_ports(plan)
    target = plan.instance(name)
    env = child_environment(plan)
    env[ADMIN_TOKEN_ENV_VAR] = ADMIN["Authorization"].removeprefix("Bearer ")
    signer = ControlSigner((plan.secret or env[SECRET_ENV_VAR]).encode(), plan)
    children: list[subprocess.Popen[bytes]] = []
    with (
        recording_relay((target.host, target.http_port)) as (relay_port, seen),
        tempfile.TemporaryDirectory(prefix="prompt-once-") as tmp,
    ):
        routed = plan.model_copy(
            update={
                "instances": tuple(
                    s.model_copy(update={"http_port": relay_port}) if s.name == name else s
                    for s in plan.instances
                )
            }
        )
        own, theirs = Path(tmp) / "instances.yaml", Path(tmp) / "router.yaml"
        own.write_text(yaml.safe_dump(plan.model_dump(mode="json")))
        theirs.write_text(yaml.safe_dump(routed.model_dump(mode="json")))
        base = [sys.executable, "-m", "prfaas"]
        try:
            for spec in plan.instances:
                argv = [*base, "instance", str(own), "--name", spec.name]
                children.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
            children.append(subprocess.Popen([*base, "router", str(theirs)], env=env))
            url = f"http://{plan.router.host}:{plan.router.port}"
            wait_healthy(url, children, START_TIMEOUT_S)
            yield Relayed(plan, url, seen, signer)
        finally:
            stop_all(children, timeout_s=30)
            for sock in held:
                sock.close()


def _wait_router_applied(run: Relayed, name: str) -> None:
    """Until the router has applied every cache event instance `name` has published (its
    index then says which prefix the instance holds)."""
    url = run.plan.instance(name).url
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        published = httpx.get(url + "/state", params={"since": 10**9}, auth=run.signer).json()
        state = httpx.get(run.url + "/admin/state", headers=ADMIN).json()
        seen = next(i for i in state["instances"] if i["name"] == name)
        if seen["cache_events_applied"] >= published["next_seq"] > 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"the router never applied {name}'s cache events")


def decode_bodies(sent: bytes) -> list[bytes]:
    """The bodies of the `POST /decode` requests in what the router sent (HTTP/1.1, each
    with its Content-Length)."""
    bodies = []
    for head in re.finditer(rb"POST /decode HTTP/1\.1\r\n(.*?)\r\n\r\n", sent, re.DOTALL):
        length = re.search(rb"(?i)content-length: *(\d+)", head.group(1))
        assert length is not None, "a /decode without Content-Length"
        bodies.append(sent[head.end() : head.end() + int(length.group(1))])
    return bodies


def _complete(client: openai.OpenAI, prompt: str) -> openai.types.Completion:
    model = client.models.list().data[0].id
    return client.completions.create(
        model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip


def test_a_long_prompts_ids_reach_the_decode_instance_in_the_kv_stream_only() -> None:
    text = "the prompt that PrfaaS exists for. " * 2_900  # 101,500 characters
    ids = p.byte_prompt_ids(text)
    with relayed(emulated_deployment(time_factor=1e-5), "pdd-0") as run:
        out = _complete(run.client(), text)
        sent = bytes(run.seen)
    expected = p.byte_text([output_token(ids, i) for i in range(MAX_TOKENS)])
    assert out.choices[0].text == expected  # the decode instance had the whole prompt
    assert out.usage is not None and out.usage.prompt_tokens == len(ids)
    (body,) = decode_bodies(sent)
    assert json.loads(body)["token_ids"] is None and len(body) < 1_000
    packed = p.pack_token_ids(ids[-3_000:]).encode()  # the prompt's last 3,000 ids, packed
    assert packed not in sent


def test_on_torch_a_decode_instance_holding_the_prefix_still_gets_the_whole_prompt() -> None:
    """The tiny hybrid preset (the default deployment, PD-P): the second request's prefill
    ships attention KV only from the prefix the decode instance holds (`from_token` > 0:
    fewer KV bytes), the whole prompt in the stream; greedy, so the same completion; and
    neither `/decode` carried ids."""
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "e2e-test-secret-0123456789")
    plan = default_deployment().model_copy(update={"router": RouterSpec(port=0)})
    prompt = "Decode keeps what it imported; only the tail travels again. "  # PD-P
    with relayed(plan, "pdd-0") as run:
        client = run.client()
        first = _complete(client, prompt)
        _wait_router_applied(run, "pdd-0")
        again = _complete(client, prompt)
        sent = bytes(run.seen)
    said = [(c.model_extra or {})["prfaas"] for c in (first, again)]
    assert [s["path"] for s in said] == ["pd-p", "pd-p"]
    assert [s["decode_instance"] for s in said] == ["pdd-0", "pdd-0"]
    assert 0 < said[1]["kv_bytes"] < said[0]["kv_bytes"]
    assert again.choices[0].text == first.choices[0].text
    bodies = decode_bodies(sent)
    assert [json.loads(b)["token_ids"] for b in bodies] == [None, None]
