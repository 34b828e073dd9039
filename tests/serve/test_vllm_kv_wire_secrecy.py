"""A TLS deployment of the vLLM backend ships its KV encrypted: the connector inside each
`vllm serve` child builds its endpoints from the shell's shipping plan (TLS included), so a
packet capture of the decode instance's transfer port holds no HELLO frame, no KV slice's
frame header and not the request id that every slice names; the same pair without TLS shows
all three, which proves the capture sees what crosses. The torch backend's twin is in
test_kv_wire_secrecy.py. Two engines per deployment (~30-100 s each on 2 cores)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_helpers import SECRET, pair_deployment
from wire_capture import check_the_transfer_port, tls_files

from prfaas.serve.backends.vllm.child import vllm_python
from prfaas.serve.launch.launcher import Launcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.vllm]

MODEL = "tiny-llama"
PROMPT = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(8))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    target = tmp_path_factory.mktemp("vllm-secrecy") / "llama"
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", "llama", str(target)]
    subprocess.run(argv, check=True, capture_output=True)
    return target


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "tls"])
def launcher(
    request: pytest.FixtureRequest, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Launcher]:
    tls = tls_files(tmp_path_factory.mktemp("tls")) if request.param else None
    deployment = pair_deployment(model_dir, MODEL).model_copy(update={"tls": tls})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
        launcher = Launcher(deployment)
        launcher.start()
        try:
            launcher.wait_healthy()
            yield launcher
        finally:
            launcher.stop()


def test_the_transfer_port_carries_plaintext_only_without_tls(launcher: Launcher) -> None:
    check_the_transfer_port(launcher, MODEL, PROMPT, timeout_s=120)
