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

from prfaas.serve.backends.vllm import vllm_python
from prfaas.serve.backends.vllm_arch import model_from_probe
from prfaas.serve.launcher import Launcher

pytestmark = [pytest.mark.vllm]

MODEL = "tiny-gpt2"
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
    deployment = pair_deployment(model_dir, "tiny-gemma2")
    file = tmp_path / "deploy.yaml"
    file.write_text(yaml.safe_dump(deployment.model_dump(mode="json")))
    env = os.environ | {"PRFAAS_TRANSFER_SECRET": SECRET}
    argv = [sys.executable, "-m", "prfaas", "instance", str(file), "--name", "pdd-0"]
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "backend vllm: Gemma2ForCausalLM (model_type 'gemma2')" in last, done.stderr
    assert "sliding_attention" in last and "window 128" in last, last


@pytest.fixture(scope="module")
def urls(gpt2_dir: Path) -> Iterator[tuple[Launcher, str]]:
    """(the deployment, a plain `vllm serve`'s URL)."""
    with serving_pair(gpt2_dir, MODEL) as pair:
        yield pair


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
    expected = complete(reference, MODEL, prompt)["choices"][0]["text"]
    got = complete(router, MODEL, prompt)
    assert got["prfaas"]["path"] == "prfaas"
    assert got["choices"][0]["text"] == expected
    assert got["usage"]["completion_tokens"] == MAX_TOKENS
    assert got["prfaas"]["kv_bytes"] > 0
    if prompt is LONG:
        assert got["usage"]["prompt_tokens"] > 1000
    assert "".join(stream_texts(router, MODEL, prompt)) == expected
