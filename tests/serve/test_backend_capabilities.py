"""What an instance's backend can do is declared and reported in `/info` (`capabilities`),
and a verb its backend lacks is answered with the typed 400 `unsupported_by_backend` before
the backend is asked (`serve.backends.interface`). A live emulated deployment (no torch): the
emulated backend ships its KV through the shell and has none of the optional verbs (its
prompts are the byte tokenizer's, which the router encodes itself). The
torch backend's are checked in test_e2e.py, the vLLM one's in test_vllm_arch.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve import protocol as p
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

PROMPT = list(range(1, 200))


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    with running(emulated_deployment()) as launcher:
        yield launcher


def _call(launcher: Launcher, name: str, path: str, body: dict[str, Any]) -> httpx.Response:
    url = launcher.deployment.instance(name).url + path
    return httpx.post(url, json=body, auth=launcher.instance_auth(), timeout=30)


def test_every_emulated_instance_reports_its_capabilities(launcher: Launcher) -> None:
    for spec in launcher.deployment.instances:
        info = httpx.get(spec.url + "/info", auth=launcher.instance_auth(), timeout=30)
        assert info.status_code == 200
        said = p.InstanceInfo.model_validate_json(info.content).capabilities
        # shell-shipped KV (the prompt ids with it), nothing optional; its prompts are the
        # byte tokenizer's
        assert said == p.CapabilitiesBody(byte_tokenizer=True, prompt_in_kv_stream=True)


def _move(launcher: Launcher) -> dict[str, Any]:
    """A cache move to a transfer endpoint the deployment names (any other is refused first)."""
    target = launcher.deployment.instance("prfaas-0")
    return {
        "move_id": "m-0",
        "token_ids": PROMPT,
        "max_tokens": 128,
        "target_transfer_host": target.host,
        "target_transfer_port": target.transfer_port,
    }


@pytest.mark.parametrize(
    ("name", "path", "body"),
    [
        ("pdd-0", "/cached", lambda _: {"token_ids": PROMPT}),
        ("pdp-0", "/prefix/send", _move),
        ("prfaas-0", "/prefix/import", lambda _: {"move_id": "m-1", "token_ids": PROMPT}),
    ],
)
def test_a_verb_the_backend_lacks_is_a_typed_400(
    launcher: Launcher, name: str, path: str, body: Callable[[Launcher], dict[str, Any]]
) -> None:
    """Answered at once, before the backend is asked: `/prefix/import` waits for no move
    (it would wait out its arrival timeout), `/cached` says no instead of a made-up 0."""
    answer = _call(launcher, name, path, body(launcher))
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "unsupported_by_backend"
    state = httpx.get(
        launcher.deployment.instance(name).url + "/state",
        auth=launcher.instance_auth(),
        timeout=30,
    )
    assert p.InstanceState.model_validate_json(state.content).active_prefills == 0
