"""Other layer kinds through vLLM instances, beyond the dense and GDN models of
test_vllm_backend.py: Gemma-3's text model (three sliding-window layers of window 128 to one
full-attention layer: vLLM keeps a `SlidingWindowSpec` group beside the full-attention one and
frees blocks that leave the window) and LFM2 (short-convolution layers beside attention: a
short-conv state in a `MambaSpec` group). Both are families prfaas's reader knows.

Each in a deployment of a PrfaaS prefill and a PD decode instance (t = 0: every request takes
the PrfaaS path) against a plain `vllm serve`, in float32, for prompts 12 to 25 times the
window: the connector ships the sliding-window blocks as attention blocks and the conv state
as a state, so the text and the logprob of every sampled token equal the single engine's.
(The random-weight Gemma-3's greedy text is all one character: the logprobs carry the test;
they would move with any wrong KV byte.)

Engines start with one reduction order (`VLLM_CPU_ATTN_SPLIT_KV=0`, as test_vllm_backend.py
explains); three engines per model (~30-100 s each on 2 shared cores).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from vllm_helpers import LONG, complete, serving_pair

from prfaas.serve.backends.vllm.child import vllm_python

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.vllm]

WINDOW = 128  # Gemma-3's; the prompts span many blocks of every kind


@pytest.fixture(scope="module", params=["gemma3", "lfm2"])
def urls(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, str]]:
    """(the served model's name, the router's URL, a plain `vllm serve`'s URL)."""
    assert vllm_python().exists(), "no vLLM venv: run `make setup-vllm` (or `make test-vllm`)"
    preset = request.param
    model = f"tiny-{preset}"
    model_dir = tmp_path_factory.mktemp("vllm-kinds") / model
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", preset, str(model_dir)]
    subprocess.run(argv, check=True, capture_output=True)
    with serving_pair(model_dir, model) as (launcher, reference):
        yield model, launcher.url, reference


@pytest.mark.parametrize("prompt", ["Once. " + LONG, "Twice. " + LONG * 2], ids=["1.6k", "3.2k"])
def test_the_decode_continues_as_the_single_engine(urls: tuple[str, str, str], prompt: str) -> None:
    model, router, reference = urls
    fields = {"max_tokens": 8, "logprobs": 1}
    got = complete(router, model, prompt, **fields)
    want = complete(reference, model, prompt, **fields)
    assert got["prfaas"]["path"] == "prfaas" and got["prfaas"]["kv_bytes"] > 0
    assert got["usage"]["prompt_tokens"] > 12 * WINDOW
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    have, expected = got["choices"][0]["logprobs"], want["choices"][0]["logprobs"]
    assert have["token_logprobs"] == pytest.approx(expected["token_logprobs"], abs=1e-4)
