"""TLS on the KV transfer channel from the deployment file: files from the file or the
environment, bad files as one-line errors, and a live emulated deployment (real processes on
loopback) whose PrfaaS-path request crosses the inter-cluster link in TLS."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_helpers import emulated_instance, make_certificate, running

from prfaas.serve.config.deployment import (
    Deployment,
    EmulationSpec,
    InstanceRole,
    RouterSpec,
    TlsSpec,
    load_deployment,
    transfer_tls,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch.launcher import Launcher

HOSTNAME = "kv.prfaas.test"
LONG = "a much longer prompt " * 20  # 421 tokens > t = 128


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"), HOSTNAME)


def _base(tls: TlsSpec | None) -> Deployment:
    return Deployment(
        model="prfaas-1t",
        threshold_tokens=128,
        router=RouterSpec(port=0),
        emulation=EmulationSpec(time_factor=0.01, byte_factor=1 / 1024),
        tls=tls,
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )


def test_tls_files_from_the_file_or_the_environment(
    certs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certs
    path = tmp_path / "deploy.yaml"
    path.write_text(
        f"tls: {{cert_file: {cert}, key_file: {key}, server_hostname: {HOSTNAME}}}\n"
        "instances: [{name: a, role: pd-decode, cluster: pd}]\n"
    )
    deployment = load_deployment(path)
    monkeypatch.delenv("PRFAAS_TLS_CA_FILE", raising=False)
    with pytest.raises(DeploymentError, match=r"tls\.ca_file and \$PRFAAS_TLS_CA_FILE"):
        transfer_tls(deployment)
    monkeypatch.setenv("PRFAAS_TLS_CA_FILE", str(cert))
    tls = transfer_tls(deployment)
    assert tls is not None and tls.ca_file == str(cert) and tls.server_hostname == HOSTNAME
    monkeypatch.setenv("PRFAAS_TLS_CA_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(DeploymentError, match="no such file"):
        transfer_tls(deployment)
    with pytest.raises(DeploymentError) as err:  # a key that is not a key
        transfer_tls(_base(TlsSpec(cert_file=str(cert), key_file=str(cert), ca_file=str(cert))))
    assert "\n" not in str(err.value)
    assert transfer_tls(_base(None)) is None
    assert transfer_tls(_base(TlsSpec(enabled=False))) is None


@pytest.fixture(scope="module")
def launcher(certs: tuple[Path, Path]) -> Iterator[Launcher]:
    cert, key = certs
    tls = TlsSpec(
        cert_file=str(cert), key_file=str(key), ca_file=str(cert), server_hostname=HOSTNAME
    )
    with running(_base(tls), timeout_s=90) as launcher:
        yield launcher


@pytest.mark.e2e
def test_a_prfaas_request_crosses_the_link_in_tls(
    launcher: Launcher, certs: tuple[Path, Path]
) -> None:
    body = {"model": "prfaas-1t", "prompt": LONG, "max_tokens": 4}
    response = httpx.post(launcher.url + "/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    extra = response.json()["prfaas"]
    assert extra["path"] == "prfaas" and extra["kv_bytes"] > 0
    # the decode instance's transfer endpoint speaks TLS with the deployment's certificate
    decode = launcher.deployment.instance("pdd-0")
    context = ssl.create_default_context(cafile=str(certs[0]))
    with (
        socket.create_connection((decode.host, decode.transfer_port), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=HOSTNAME) as tls,
    ):
        assert tls.version() is not None
