"""The control plane is authenticated: the router's /admin/* needs the admin bearer token, an
instance's control API takes signed calls from its own deployment only (fresh, unreplayed,
signed for that instance with the deployment's secret), and an instance connects to no
transfer endpoint its deployment does not name. A live emulated deployment (no torch)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serve_helpers import emulated_deployment, running

from prfaas.serve import protocol as p
from prfaas.serve.auth.control import ControlSigner, control_key, signed_headers
from prfaas.serve.launch.launcher import Launcher

pytestmark = pytest.mark.e2e

JSON = "application/json"


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    with running(emulated_deployment()) as launcher:
        yield launcher


def _error_type(response: httpx.Response) -> str:
    body: dict[str, Any] = response.json()
    return str(body["error"]["type"])


def test_admin_endpoints_need_the_bearer_token(launcher: Launcher) -> None:
    state = launcher.url + "/admin/state"
    for headers in ({}, {"Authorization": "Bearer not-the-token"}, {"Authorization": "x"}):
        refused = httpx.get(state, headers=headers, timeout=30)
        assert refused.status_code == 401
        assert _error_type(refused) == "authentication_error"
    rebalance = httpx.post(launcher.url + "/admin/rebalance", timeout=30)
    assert rebalance.status_code == 401
    flip = launcher.url + "/admin/instances/pdd-0/role"
    assert httpx.post(flip, json={"role": "pd-prefill"}, timeout=30).status_code == 401
    shown = httpx.get(state, headers=launcher.admin_headers, timeout=30)
    assert shown.status_code == 200 and shown.json()["model"] == "prfaas-1t"


def test_health_metrics_and_the_api_stay_open(launcher: Launcher) -> None:
    assert httpx.get(launcher.url + "/health", timeout=30).status_code == 200
    assert httpx.get(launcher.url + "/metrics", timeout=30).status_code == 200
    body = {"model": "prfaas-1t", "prompt": "open to clients", "max_tokens": 2}
    assert httpx.post(launcher.url + "/v1/completions", json=body, timeout=60).status_code == 200


def _instance_url(launcher: Launcher, name: str = "pdd-0") -> str:
    return launcher.deployment.instance(name).url


def test_unsigned_or_wrongly_signed_instance_calls_are_refused(launcher: Launcher) -> None:
    url = _instance_url(launcher)
    unsigned = httpx.get(url + "/info", timeout=30)
    assert unsigned.status_code == 401 and _error_type(unsigned) == "authentication_error"
    stranger = ControlSigner(b"a secret of another deployment!!", launcher.deployment)
    assert httpx.get(url + "/info", auth=stranger, timeout=30).status_code == 401
    tokenize = httpx.post(url + "/tokenize", json={"text": "hi"}, auth=stranger, timeout=30)
    assert tokenize.status_code == 401
    signed = httpx.get(url + "/info", auth=launcher.instance_auth(), timeout=30)
    assert signed.status_code == 200 and signed.json()["name"] == "pdd-0"


def _key(launcher: Launcher) -> bytes:
    secret = launcher.deployment.secret or launcher._env["PRFAAS_TRANSFER_SECRET"]
    return control_key(secret.encode())


def test_stale_replayed_and_altered_calls_are_refused(launcher: Launcher) -> None:
    url, key = _instance_url(launcher), _key(launcher)
    stale = signed_headers(key, "pdd-0", "GET", "/info", now_s=time.time() - 600)
    assert httpx.get(url + "/info", headers=stale, timeout=30).status_code == 401
    ahead = signed_headers(key, "pdd-0", "GET", "/info", now_s=time.time() + 600)
    assert httpx.get(url + "/info", headers=ahead, timeout=30).status_code == 401
    fresh = signed_headers(key, "pdd-0", "GET", "/info")
    assert httpx.get(url + "/info", headers=fresh, timeout=30).status_code == 200
    replayed = httpx.get(url + "/info", headers=fresh, timeout=30)
    assert replayed.status_code == 401 and "replayed" in replayed.json()["error"]["message"]
    body = json.dumps({"text": "signed text"}).encode()
    headers = signed_headers(key, "pdd-0", "POST", "/tokenize", body=body)
    altered = json.dumps({"text": "other text!"}).encode()
    response = httpx.post(url + "/tokenize", content=altered, headers=headers, timeout=30)
    assert response.status_code == 401
    moved = signed_headers(key, "pdd-0", "GET", "/info")
    assert httpx.get(url + "/state?since=0", headers=moved).status_code == 401  # another path


def _signed(auth: httpx.Auth, method: str, url: str, body: bytes = b"") -> dict[str, str]:
    """The headers the router's signer (the same `httpx.Auth`) puts on this call, and its
    Content-Type."""
    request = httpx.Request(method, url, content=body, headers={"content-type": JSON})
    signed = next(auth.sync_auth_flow(request))
    return {k: v for k, v in signed.headers.items() if k.startswith("x-prfaas-")} | {
        "content-type": JSON
    }


def _captured_prefill(launcher: Launcher) -> bytes:
    decode = launcher.deployment.instance("pdd-0")
    body = {**_prefill_body(decode.host, decode.transfer_port), "request_id": "captured-1"}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("target", "method", "path"),
    [
        ("pdd-0", "GET", "/state?since=0"),
        ("pdd-0", "POST", "/tokenize"),
        ("prfaas-0", "POST", "/prefill"),
    ],
    ids=["state", "tokenize", "prefill"],
)
def test_a_signed_call_is_taken_once_and_by_its_own_instance_only(
    launcher: Launcher, target: str, method: str, path: str
) -> None:
    """A call signed for one instance, replayed to the others or to the same one again, is
    refused there (issue 26: a captured /prefill ran on another instance)."""
    plain = b"" if method == "GET" else b'{"text": "captured"}'
    body = _captured_prefill(launcher) if path == "/prefill" else plain
    url = _instance_url(launcher, target) + path
    headers = _signed(launcher.instance_auth(), method, url, body)
    original = httpx.request(method, url, content=body, headers=headers, timeout=30)
    assert original.status_code == 200
    for spec in launcher.deployment.instances:
        if spec.name == target:
            continue
        elsewhere = httpx.request(
            method, spec.url + path, content=body, headers=headers, timeout=30
        )
        assert elsewhere.status_code == 401, spec.name
        assert f"signed for instance {target!r}" in elsewhere.json()["error"]["message"]
    replayed = httpx.request(method, url, content=body, headers=headers, timeout=30)
    assert replayed.status_code == 401
    assert "replayed" in replayed.json()["error"]["message"]


def _prefill_body(host: str, port: int) -> dict[str, Any]:
    sampling = {"max_tokens": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": 0}
    return {
        "request_id": "outsider-1",
        "token_ids": p.pack_token_ids([1, 2, 3, 4]),
        "sampling": sampling,
        "decode_transfer_host": host,
        "decode_transfer_port": port,
    }


def test_an_instance_connects_to_no_peer_its_deployment_does_not_name(launcher: Launcher) -> None:
    """Even a correctly signed /prefill or /prefix/send naming another listener is refused,
    and that listener is never dialled."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        auth = launcher.instance_auth()
        url = _instance_url(launcher, "prfaas-0")
        prefill = httpx.post(
            url + "/prefill", json=_prefill_body("127.0.0.1", port), auth=auth, timeout=30
        )
        assert prefill.status_code == 400
        assert "not a transfer endpoint of this deployment" in prefill.json()["error"]["message"]
        send = {
            "move_id": "move-outsider",
            "token_ids": p.pack_token_ids([1, 2, 3]),
            "max_tokens": 16,
            "target_transfer_host": "127.0.0.1",
            "target_transfer_port": port,
        }
        pd_p = _instance_url(launcher, "pdp-0")
        moved = httpx.post(pd_p + "/prefix/send", json=send, auth=auth, timeout=30)
        assert moved.status_code == 400
        assert "not a transfer endpoint of this deployment" in moved.json()["error"]["message"]
        listener.settimeout(1.0)
        with pytest.raises(TimeoutError):
            listener.accept()
