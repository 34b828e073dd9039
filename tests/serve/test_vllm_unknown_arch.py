"""An architecture prfaas's config reader does not know, served through vLLM's own reading.

The tiny GPT-2 (`integrations/vllm/tiny.py gpt2`: float32, head dim 64, only a slow
tokenizer's `vocab.json` + `merges.txt`, no `tokenizer.json`) is not a `model_type` of
`specs/hf_config.py`. Its instances ask vLLM (`prfaas.integrations.vllm.probe`, run in the vLLM
venv) and serve it as a full-attention dense model, with the fast tokenizer transformers
converts for vLLM. A deployment of a PrfaaS prefill and a PD decode instance (t = 0: every
request takes the PrfaaS path) must give the greedy text of a plain `vllm serve` of the same
directory, for a short and a >1,000-token prompt, and streamed in the same deltas. An
architecture vLLM serves with sliding-window layers (Gemma-2, a config-only directory: no
engine starts) is refused at the instance's start with the reason.

Engines start with one reduction order (`VLLM_CPU_ATTN_SPLIT_KV=0`, as test_vllm_backend.py
explains); three engines in all (~30-100 s each on 2 shared cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tokenizers import Tokenizer

from prfaas.serve.backends.vllm import vllm_environment, vllm_python
from prfaas.serve.backends.vllm_arch import model_from_probe
from prfaas.serve.backends.vllm_spec import VllmSpec
from prfaas.serve.config import (
    Backend,
    Deployment,
    InstanceRole,
    InstanceSpec,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
    free_port,
)
from prfaas.serve.launcher import Launcher

pytestmark = [pytest.mark.vllm]

SHORT = "The lazy dog sleeps."
LONG = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
MAX_TOKENS = 12
MODEL = "tiny-gpt2"
SECRET = "vllm-e2e-secret-0123456789"
GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "vocab_size": 384,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "sliding_window": 128,
    "max_position_embeddings": 4096,
}


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    target = tmp_path_factory.mktemp("vllm-unknown") / MODEL
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", "gpt2", str(target)]
    subprocess.run(argv, check=True, capture_output=True)
    assert not (target / "tokenizer.json").exists()
    return target


def test_the_probe_reports_what_vllm_decides(gpt2_dir: Path) -> None:
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.probe", str(gpt2_dir)]
    done = subprocess.run(
        [*argv, "--dtype", "float32"], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout)  # one JSON object: vLLM's logs went to stderr
    assert facts["architecture"] == "GPT2LMHeadModel"
    assert (facts["dtype"], facts["dtype_bytes"]) == ("float32", 4)
    assert not (facts["is_hybrid"] or facts["is_attention_free"] or facts["use_mla"])
    assert (facts["num_layers"], facts["num_attention_layers"]) == (2, 2)
    assert (facts["num_kv_heads"], facts["head_size"], facts["sliding_window"]) == (2, 64, None)
    assert model_from_probe(facts, MODEL).kv_bytes_per_token() == 2 * 2 * 2 * 64 * 4
    # the fast tokenizer transformers converted from vocab.json + merges.txt: bytes as tokens
    tokenizer = Tokenizer.from_str(facts["tokenizer_json"])
    assert len(tokenizer.encode("The lazy dog").ids) == len("The lazy dog")
    print(f"probe: {facts['seconds']} s inside the probe")
    # vLLM's own dtype when the deployment names none (`auto`: bf16 on CPU for a f32 model),
    # and the KV cache dtype an engine flag (the deployment's `vllm.extra_args`) sets
    flags = [*argv, "--", "--kv-cache-dtype", "fp8"]
    auto = json.loads(subprocess.run(flags, check=True, capture_output=True, text=True).stdout)
    assert (auto["dtype_bytes"], auto["kv_cache_dtype"], auto["kv_dtype_bytes"]) == (2, "fp8", 1)


def test_an_architecture_with_sliding_window_layers_is_refused_at_start(
    tmp_path: Path,
) -> None:
    """`prfaas instance` (what `prfaas up` starts) exits with one line naming the
    architecture and what prfaas lacks, before any engine starts."""
    model_dir = tmp_path / "tiny-gemma2"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(GEMMA2))
    deployment = _deployment(model_dir).model_copy(update={"served_model_name": "tiny-gemma2"})
    file = tmp_path / "deploy.yaml"
    file.write_text(yaml.safe_dump(deployment.model_dump(mode="json")))
    env = os.environ | {"PRFAAS_TRANSFER_SECRET": SECRET}
    argv = [sys.executable, "-m", "prfaas", "instance", str(file), "--name", "pdd-0"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "backend vllm: Gemma2ForCausalLM (model_type 'gemma2')" in last, done.stderr
    assert "sliding_attention" in last and "window 128" in last, last


def _deployment(model_dir: Path) -> Deployment:
    def vllm(name: str, role: InstanceRole, cluster: str) -> InstanceSpec:
        return InstanceSpec(name=name, role=role, cluster=cluster, backend=Backend.VLLM)

    return Deployment(
        model=str(model_dir),
        served_model_name=MODEL,
        block_tokens=64,
        threshold_tokens=0,
        router=RouterSpec(port=0, request_timeout_s=120.0),
        link=LinkSpec(rate_gbps=1.0, rtt_ms=0),
        rebalance=RebalanceSpec(enabled=False),
        vllm=VllmSpec(dtype="float32", max_model_len=4096, start_timeout_s=1500),
        instances=(
            vllm("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
            vllm("pdd-0", InstanceRole.PD_DECODE, "pd"),
        ),
    )


def _wait_ok(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{url}/health not ready in {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def urls(gpt2_dir: Path) -> Iterator[tuple[Launcher, str]]:
    """(the deployment, a plain `vllm serve`'s URL), every engine with one reduction order."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
        env.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
        launcher = Launcher(_deployment(gpt2_dir))
        launcher.start()
        reference: subprocess.Popen[bytes] | None = None
        try:
            launcher.wait_healthy()
            port = free_port()
            argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.serve_main", "serve"]
            argv += [str(gpt2_dir), "--port", str(port), "--served-model-name", MODEL]
            argv += ["--enforce-eager", "--max-model-len", "4096", "--dtype", "float32"]
            reference = subprocess.Popen(
                argv,
                env=vllm_environment(VllmSpec(kv_cache_gib=1)),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _wait_ok(f"http://127.0.0.1:{port}", 600)
            yield launcher, f"http://127.0.0.1:{port}"
        finally:
            if reference is not None:
                reference.send_signal(signal.SIGTERM)
            launcher.stop()
            if reference is not None:
                try:
                    reference.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    reference.kill()


def _complete(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    response = httpx.post(url + "/v1/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _stream_texts(url: str, prompt: str) -> list[str]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    pieces = []
    with httpx.stream(
        "POST", url + "/v1/completions", json=body | {"stream": True}, timeout=600
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in json.loads(line[6:]).get("choices", []):
                    if choice.get("text"):
                        pieces.append(choice["text"])
    return pieces


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("prompt", [SHORT, LONG], ids=["short", "long"])
def test_greedy_text_through_prfaas_equals_one_vllm(
    urls: tuple[Launcher, str], prompt: str
) -> None:
    launcher, reference = urls
    router = launcher.url
    # the router sizes this model's KV as vLLM holds it: 2 x 2 layers x 2 heads x 64 x f32
    info = httpx.get(
        launcher.deployment.instance("prfaas-0").url + "/info", auth=launcher.instance_auth()
    )
    assert info.json()["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 4
    expected = _complete(reference, prompt)["choices"][0]["text"]
    got = _complete(router, prompt)
    assert got["prfaas"]["path"] == "prfaas"
    assert got["choices"][0]["text"] == expected
    assert got["usage"]["completion_tokens"] == MAX_TOKENS
    assert got["prfaas"]["kv_bytes"] > 0
    if prompt is LONG:
        assert got["usage"]["prompt_tokens"] > 1000
    assert _stream_texts(router, prompt) == _stream_texts(reference, prompt)
