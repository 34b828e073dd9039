"""A sliding-window model through vLLM instances: Gemma-3's text model (a `model_type`
prfaas's reader knows), three sliding-window layers (window 128) to one full-attention layer,
which vLLM keeps as a `SlidingWindowSpec` group beside the full-attention one (blocks that
leave the window are freed).

A deployment of a PrfaaS prefill and a PD decode instance (t = 0: every request takes the
PrfaaS path) against a plain `vllm serve`, both in float32, for prompts 12 to 25 times the
window: the connector ships the sliding-window group's blocks as attention blocks, and the
decode must see the same window, so every logprob of the sampled token and of the runner-up
equals the single engine's. (This random-weight model's greedy text is all one character,
so the text alone would prove little; the logprobs would move with any wrong KV byte.)

Engines start with one reduction order (`VLLM_CPU_ATTN_SPLIT_KV=0`, as test_vllm_backend.py
explains); three engines in all (~30-100 s each on 2 shared cores).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from vllm_helpers import LONG, complete, start_reference, stop_all, vllm_instance, wait_ok

from prfaas.serve.backends.vllm import vllm_python
from prfaas.serve.backends.vllm_spec import VllmSpec
from prfaas.serve.config import (
    Deployment,
    InstanceRole,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
    free_port,
)
from prfaas.serve.launcher import Launcher

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.vllm]

MODEL = "tiny-gemma3"
WINDOW = 128


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the router's URL, a plain `vllm serve`'s URL)."""
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    model_dir = tmp_path_factory.mktemp("vllm-swa") / MODEL
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", "gemma3", str(model_dir)]
    subprocess.run(argv, check=True, capture_output=True)
    deployment = Deployment(
        model=str(model_dir),
        served_model_name=MODEL,
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
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PRFAAS_TRANSFER_SECRET", "vllm-e2e-secret-0123456789")
        env.setenv("VLLM_CPU_ATTN_SPLIT_KV", "0")
        launcher = Launcher(deployment)
        launcher.start()
        reference: list[subprocess.Popen[bytes]] = []
        try:
            launcher.wait_healthy()
            port = free_port()
            reference.append(start_reference(model_dir, MODEL, port, "float32"))
            wait_ok(f"http://127.0.0.1:{port}", "/health", 600)
            yield launcher.url, f"http://127.0.0.1:{port}"
        finally:
            launcher.stop()
            stop_all(reference)


@pytest.mark.parametrize("prompt", ["Once. " + LONG, "Twice. " + LONG * 2], ids=["1.6k", "3.2k"])
def test_the_decode_sees_the_single_engines_window(urls: tuple[str, str], prompt: str) -> None:
    router, reference = urls
    fields = {"max_tokens": 8, "logprobs": 5}
    got = complete(router, MODEL, prompt, **fields)
    # token ids as keys: byte tokens' texts collide in a text-keyed dict (test_vllm_backend)
    want = complete(reference, MODEL, prompt, return_tokens_as_token_ids=True, **fields)
    assert got["prfaas"]["path"] == "prfaas" and got["prfaas"]["kv_bytes"] > 0
    assert got["usage"]["prompt_tokens"] > 12 * WINDOW
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    have, expected = got["choices"][0]["logprobs"], want["choices"][0]["logprobs"]
    assert have["token_logprobs"] == pytest.approx(expected["token_logprobs"], abs=1e-4)
    for mine, theirs in zip(have["top_logprobs"], expected["top_logprobs"], strict=True):
        runner_up = sorted(mine.values())[-2], sorted(theirs.values())[-2]
        assert runner_up[0] == pytest.approx(runner_up[1], abs=1e-4)
