"""A TLS deployment of the torch backend ships its KV encrypted: a packet capture of the decode
instance's transfer port (real processes on loopback) holds no HELLO frame, no KV slice's
frame header and not the request id that every slice names; the same deployment without TLS
shows all three, which proves the capture sees what crosses. The prompt's ids, which cross
beside the KV (a PROMPT frame), are covered alike. The vLLM backend's twin is in
test_vllm_kv_wire_secrecy.py."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import running
from wire_capture import check_the_transfer_port, loopback_capture, tls_files

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    InstanceSpec,
    LinkShaping,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
)
from prfaas.serve.launch.launcher import Launcher
from prfaas.transfer.wire import MAGIC, PROTOCOL_VERSION, FrameKind, encode_prompt

pytestmark = pytest.mark.e2e

MODEL = "tiny-qwen3-next"
PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "tls"])
def launcher(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launcher]:
    tls = tls_files(tmp_path_factory.mktemp("tls")) if request.param else None
    deployment = Deployment(
        model=MODEL,
        threshold_tokens=0,  # every request takes the PrfaaS path, over loopback
        router=RouterSpec(port=0),
        link=LinkSpec(shaping=LinkShaping.TOKEN_BUCKET, rtt_ms=0),
        rebalance=RebalanceSpec(enabled=False),
        tls=tls,
        instances=(
            InstanceSpec(name="prfaas-0", role=InstanceRole.PRFAAS_PREFILL, cluster="prfaas"),
            InstanceSpec(name="pdd-0", role=InstanceRole.PD_DECODE, cluster="pd"),
        ),
    )
    with running(deployment, timeout_s=120) as launcher:
        yield launcher


def test_the_transfer_port_carries_plaintext_only_without_tls(launcher: Launcher) -> None:
    check_the_transfer_port(launcher, MODEL, PROMPT, timeout_s=60)


def test_the_prompts_ids_cross_encrypted_with_tls(launcher: Launcher) -> None:
    """The PROMPT frame (the prompt's ids beside the KV, protocol v5) is covered by TLS like
    the KV: its header and its payload (the ids as uint32s) are on the wire in plaintext only
    without `tls:`."""
    text = "The prompt's ids travel with the KV now, under the link's TLS. " * 3
    decode = launcher.deployment.instance("pdd-0")
    body = {"model": MODEL, "prompt": text, "max_tokens": 2, "temperature": 0}
    with loopback_capture(decode.transfer_port) as seen:
        response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    captured = bytes(seen)
    header = MAGIC + bytes([PROTOCOL_VERSION, FrameKind.PROMPT])
    payload = encode_prompt(p.byte_prompt_ids(text))
    plain = launcher.deployment.tls is None
    assert (header in captured, payload in captured) == (plain, plain)
