"""Shared pieces of the vLLM end-to-end tests: prompts, a plain `vllm serve` as the
reference, and the requests both sides get."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from prfaas.serve.backends.vllm.child import vllm_environment, vllm_python
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    InstanceRole,
    InstanceSpec,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
    free_port,
)
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.launch.launcher import Launcher

SHORT = "The lazy dog sleeps."
LONG = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
MAX_TOKENS = 12
SECRET = "vllm-e2e-secret-0123456789"


def vllm_instance(name: str, role: InstanceRole, cluster: str) -> InstanceSpec:
    return InstanceSpec(name=name, role=role, cluster=cluster, backend=Backend.VLLM)


def pair_deployment(model_dir: Path, model: str) -> Deployment:
    """A PrfaaS prefill and a PD decode vLLM instance, float32, t = 0 (every request takes
    the PrfaaS path): the fewest engines that exercise the inter-cluster hand-off."""
    return Deployment(
        model=str(model_dir),
        served_model_name=model,
        block_tokens=64,
        threshold_tokens=0,
        router=RouterSpec(port=0, request_timeout_s=120.0),
        link=LinkSpec(rate_gbps=1.0, rtt_ms=0),
        rebalance=RebalanceSpec(enabled=False),
        vllm=VllmSpec(dtype="float32", max_model_len=4096, start_timeout_s=1500),
        instances=(
            vllm_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
            vllm_instance("pdd-0", InstanceRole.PD_DECODE, "pd"),
        ),
    )


@contextlib.contextmanager
def serving_pair(model_dir: Path, model: str) -> Iterator[tuple[Launcher, str]]:
    """`pair_deployment` up and a plain `vllm serve` beside it: (the launcher, the
    reference's URL), every engine with one reduction order (`VLLM_CPU_ATTN_SPLIT_KV=0`)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
        env.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
        launcher = Launcher(pair_deployment(model_dir, model))
        launcher.start()
        reference: list[subprocess.Popen[bytes]] = []
        try:
            launcher.wait_healthy()
            port = free_port()
            reference.append(start_reference(model_dir, model, port, "float32"))
            wait_ok(f"http://127.0.0.1:{port}", "/health", 600)
            yield launcher, f"http://127.0.0.1:{port}"
        finally:
            launcher.stop()
            stop_all(reference)


def start_reference(model_dir: Path, name: str, port: int, dtype: str) -> subprocess.Popen[bytes]:
    """A plain `vllm serve` of the checkpoint with the instances' engine settings."""
    env = vllm_environment(VllmSpec(kv_cache_gib=1))
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.serve_main", "serve"]
    argv += [str(model_dir), "--port", str(port), "--served-model-name", name]
    argv += ["--enforce-eager", "--max-model-len", "4096", "--dtype", dtype]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_all(children: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    children = list(children)
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()


def wait_ok(url: str, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url + path, timeout=2.0)
            # vLLM's /health is a bare 200; prfaas's router answers {"status": "ok"}
            if response.status_code == 200 and (
                not response.content or response.json().get("status") == "ok"
            ):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{url}{path} not ready in {timeout_s:.0f} s")


def complete(url: str, model: str, prompt: str | list[int], **fields: Any) -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    body.update(fields)
    response = httpx.post(url + "/v1/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return dict(response.json())


def stream_texts(url: str, model: str, prompt: str, **fields: Any) -> list[str]:
    """The non-empty text deltas of a streamed completion, in order.

    Compare their join, not the list: vLLM merges the deltas a slow reader has not yet taken
    (its output collector), so where one delta ends depends on timing, in `vllm serve` too."""
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    pieces = []
    with httpx.stream(
        "POST", url + "/v1/completions", json=body | fields | {"stream": True}, timeout=600
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    if choice.get("text"):
                        pieces.append(choice["text"])
    return pieces
