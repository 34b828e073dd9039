"""Architectures prfaas's config reader does not know, served through vLLM's own reading.

Three tiny checkpoints (`integrations/vllm/tiny.py`, float32, head dim 64) whose `model_type`
is not one of `specs/hf_config.py`'s: GPT-2 (full attention, only a slow tokenizer's
`vocab.json` + `merges.txt`, no `tokenizer.json`), Gemma-2 (sliding-window and full layers,
`layer_types`) and Mixtral with a window and no `layer_types` (experts; vLLM slides every
layer). Their instances ask vLLM (`prfaas.integrations.vllm.probe`, run in the vLLM venv) and
serve them with the layers vLLM reports, which the connector's cache layout confirms at start.
For each, a deployment of a PrfaaS prefill and a PD decode instance (t = 0: every request
takes the PrfaaS path) must give the greedy text of a plain `vllm serve` of the same directory,
streamed and not, for a short and a >1,000-token prompt (past the 128-token windows). An
architecture vLLM serves attention-free (Mamba, a config-only directory: no engine starts) is
refused at the instance's start with the reason, and one whose engine builds other layers than
prfaas read (a Mixtral listing `layer_types` vLLM's Mixtral ignores) exits at start, status 2.

Engines start with one reduction order (`VLLM_CPU_ATTN_SPLIT_KV=0`, as test_vllm_backend.py
explains); three engines per model (~30-100 s each on 2 shared cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from tokenizers import Tokenizer
from vllm_helpers import (
    LONG,
    MAX_TOKENS,
    SECRET,
    SHORT,
    complete,
    pair_deployment,
    serving_pair,
    stream_texts,
)

from prfaas.serve.backends.vllm.arch import model_from_probe
from prfaas.serve.backends.vllm.child import vllm_python
from prfaas.serve.launch.launcher import Launcher

pytestmark = [pytest.mark.vllm]

MODEL = "tiny-gpt2"
MAMBA = {
    "architectures": ["MambaForCausalLM"],
    "model_type": "mamba",
    "vocab_size": 384,
    "hidden_size": 128,
    "state_size": 16,
    "num_hidden_layers": 2,
    "expand": 2,
    "conv_kernel": 4,
}
#: Each served preset and the KV bytes per prompt token the router must size it with:
#: 2 (K, V) x full-attention layers x KV heads x 64 x 4 (float32); sliding layers hold a
#: window (state), not per-token KV.
SERVED = {
    "gpt2": 2 * 2 * 2 * 64 * 4,  # 2 full layers, 2 KV heads
    "gemma2": 2 * 1 * 1 * 64 * 4,  # 1 full layer beside 1 sliding, 1 KV head
    "mixtral-swa": 0,  # every layer slides
}


def _build(preset: str, factory: pytest.TempPathFactory) -> Path:
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    target = factory.mktemp("vllm-unknown") / f"tiny-{preset}"
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", preset, str(target)]
    subprocess.run(argv, check=True, capture_output=True)
    return target


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = _build("gpt2", tmp_path_factory)
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


def test_an_attention_free_architecture_is_refused_at_start(tmp_path: Path) -> None:
    """`prfaas instance` (what `prfaas up` starts) exits with one line naming the
    architecture and what prfaas lacks, before any engine starts."""
    model_dir = tmp_path / "tiny-mamba"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(MAMBA))
    deployment = pair_deployment(model_dir, "tiny-mamba")
    file = tmp_path / "deploy.yaml"
    file.write_text(yaml.safe_dump(deployment.model_dump(mode="json")))
    env = os.environ | {"PRFAAS_TRANSFER_SECRET": SECRET}
    argv = [sys.executable, "-m", "prfaas", "instance", str(file), "--name", "pdd-0"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert "backend vllm: MambaForCausalLM (model_type 'mamba')" in last, done.stderr
    assert "attention-free" in last, last


@pytest.mark.e2e
@pytest.mark.slow
def test_an_engine_that_builds_other_layers_than_read_stops_at_start(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """vLLM's Mixtral ignores `layer_types` (no per-layer window; a window applies to every
    layer only without them): listed as sliding + full, its engine builds two full-attention
    layers. The connector's cache layout says so, and the instance exits (status 2) with
    both readings instead of sizing the router's KV as 1 full + 1 sliding layer."""
    model_dir = _build("mixtral-swa", tmp_path_factory)
    config = json.loads((model_dir / "config.json").read_text())
    config["layer_types"] = ["sliding_attention", "full_attention"]
    (model_dir / "config.json").write_text(json.dumps(config))
    deployment = pair_deployment(model_dir, "tiny-mixtral")
    file = model_dir.parent / "deploy.yaml"
    file.write_text(yaml.safe_dump(deployment.model_dump(mode="json")))
    env = os.environ | {"PRFAAS_TRANSFER_SECRET": SECRET}
    argv = [sys.executable, "-m", "prfaas", "instance", str(file), "--name", "pdd-0"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=1500)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "vLLM built layers of 2 x full attention (1 KV heads x 64) for tiny-mixtral" in last
    read = "prfaas read 1 x full attention (1 KV heads x 64), 1 x sliding window 128 (1 KV"
    assert read in last, last


@pytest.fixture(scope="module", params=list(SERVED))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Launcher, str]]:
    """(the preset, its deployment, a plain `vllm serve`'s URL)."""
    preset = request.param
    with serving_pair(_build(preset, tmp_path_factory), f"tiny-{preset}") as (launcher, url):
        yield preset, launcher, url


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("prompt", [SHORT, LONG], ids=["short", "long"])
def test_greedy_text_through_prfaas_equals_one_vllm(
    served: tuple[str, Launcher, str], prompt: str
) -> None:
    preset, launcher, reference = served
    model, router = f"tiny-{preset}", launcher.url
    # the router sizes this model's KV as vLLM holds it
    info = httpx.get(
        launcher.deployment.instance("prfaas-0").url + "/info", auth=launcher.instance_auth()
    )
    assert info.json()["kv_bytes_per_token"] == SERVED[preset]
    expected = complete(reference, model, prompt)["choices"][0]["text"]
    got = complete(router, model, prompt)
    assert got["prfaas"]["path"] == "prfaas"
    assert got["choices"][0]["text"] == expected
    assert got["usage"]["completion_tokens"] == MAX_TOKENS
    assert got["prfaas"]["kv_bytes"] > 0
    if prompt is LONG:
        assert got["usage"]["prompt_tokens"] > 1000
    assert "".join(stream_texts(router, model, prompt)) == expected
