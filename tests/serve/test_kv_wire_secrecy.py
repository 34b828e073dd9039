"""A TLS deployment of the torch backend ships its KV encrypted: a packet capture of the decode
instance's transfer port (real processes on loopback) holds no HELLO frame, no KV slice's
frame header and not the request id that every slice names; the same deployment without TLS
shows all three, which proves the capture sees what crosses. The vLLM backend's twin is in
test_vllm_kv_wire_secrecy.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serve_helpers import running
from wire_capture import check_the_transfer_port, tls_files

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
