"""`prfaas up`, `prfaas router`, `prfaas instance` refuse a bad deployment before starting
anything: every problem on its own line naming the field, exit code 2, no "serving" line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from prfaas.serve.config.deployment import free_port

BAD = """\
model: tiny-qwen3-next
secret: too-short
router: {port: 29201}
instances:
  - {name: a, role: pd-prefill, cluster: pd, http_port: 29202, transfer_port: 29203}
  - {name: a, role: pd-prefill, cluster: pd, http_port: 29202}
"""


def prfaas(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PRFAAS_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-m", "prfaas", *args],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
        timeout=120,
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_up_lists_every_problem_of_the_file_and_starts_nothing(tmp_path: Path) -> None:
    """(Fixed ports below Linux's ephemeral range, so no outgoing connection holds them.)"""
    path = tmp_path / "deploy.yaml"
    path.write_text(BAD)
    result = prfaas("up", str(path))
    assert result.returncode == 2
    assert result.stdout == ""  # no "serving" line
    assert result.stderr.splitlines() == [
        "prfaas: error: instances: no pd-decode instance (every request needs one to decode)",
        "prfaas: error: instances.1.name: 'a' is also instances.0.name",
        "prfaas: error: instances.1.http_port: port 29202 is also instances.0.http_port "
        "(127.0.0.1)",
        "prfaas: error: secret: needs at least 16 bytes",
    ]


def test_types_are_strict_on_the_command_line_too(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text("threshold_tokens: '96'\npayload_checks: 'no'\ninstances: []\n")
    result = prfaas("router", str(path))
    assert result.returncode == 2
    assert [line.split(": ")[3] for line in result.stderr.splitlines()] == [
        "threshold_tokens",
        "payload_checks",
    ]


def test_up_with_its_port_taken_is_one_line_and_exit_2(taken_port: int) -> None:
    result = prfaas("up", "--port", str(taken_port), "--model", "tiny-llama")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"prfaas: error: router.port: 127.0.0.1:{taken_port} is already in use on this host"
    ]


def test_up_flags_are_checked_like_the_file() -> None:
    result = prfaas("up", "--host", "192.0.2.77", "--port", "29210", "--model", "nope")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "prfaas: error: router.host: 192.0.2.77 is not an address of this host",
        "prfaas: error: model: unknown model 'nope': not a preset (`prfaas generate "
        "--list-models`), smollm2-135m or a checkpoint directory",
    ]


def test_router_and_instance_need_the_transfer_secret(tmp_path: Path, taken_port: int) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(  # the router on a port free now: beside a running `prfaas up` (8000)
        f"router: {{port: {free_port()}}}\n"
        "instances:\n"
        f"  - {{name: p, role: pd-prefill, cluster: pd, transfer_port: {taken_port}}}\n"
        "  - {name: d, role: pd-decode, cluster: pd}\n"
    )
    router = prfaas("router", str(path))
    assert router.returncode == 2
    assert router.stderr.splitlines() == [
        "prfaas: error: secret: no transfer secret (set `secret` or $PRFAAS_TRANSFER_SECRET)"
    ]
    instance = prfaas("instance", str(path), "--name", "p", PRFAAS_TRANSFER_SECRET="x" * 20)
    assert instance.returncode == 2
    assert instance.stderr.splitlines() == [
        f"prfaas: error: instances.0.transfer_port: 127.0.0.1:{taken_port} is already in use "
        "on this host"
    ]


def test_up_backend_vllm_needs_a_model_directory(tmp_path: Path) -> None:
    """`--backend vllm` turns every instance of the deployment into a vLLM engine; the
    deployment is checked again with it (a catalog name is no model directory)."""
    result = prfaas("up", "--backend", "vllm", "--model", "tiny-qwen3-next")
    assert result.returncode == 2 and result.stdout == ""
    assert "vllm instances need a local model directory, not 'tiny-qwen3-next'" in result.stderr


def test_command_line_overrides_apply_to_every_instance(tmp_path: Path) -> None:
    from prfaas.cli.serve import _overridden
    from prfaas.serve.config.deployment import Backend, default_deployment

    deployment = _overridden(default_deployment(), "0.0.0.0", 9000, str(tmp_path), Backend.VLLM)
    assert (deployment.router.host, deployment.router.port) == ("0.0.0.0", 9000)
    assert deployment.model == str(tmp_path)
    assert {spec.backend for spec in deployment.instances} == {Backend.VLLM}
    assert len(deployment.instances) == len(default_deployment().instances)
