"""`prfaas up --backend vllm --model DIR` against `vllm serve DIR`, one model family at a time.

    .venv/bin/python benchmarks/vllm_families.py [FAMILY ...]     # default: every family below

A conformance survey beyond the end-to-end tests' models, not a speed figure. For each family a
tiny random-weight checkpoint is built in the vLLM venv (`integrations/vllm/tiny.py --fields`:
float32, seed 0, the byte-level tokenizer), then prfaas's default deployment on vLLM engines
(the README's one line: a PrfaaS prefill, a PD prefill and a PD decode instance) and a plain
`vllm serve` of the same directory (its `--dtype auto`, as `prfaas up` leaves it) answer the same
requests: greedy completions of a short prompt (the PD-P path) and of a ~1,600-token prompt
(the PrfaaS path: vLLM prefill -> link -> vLLM decode), streamed and not, and a greedy chat.
A family prfaas refuses is recorded with the one line `prfaas up` printed. Needs
`make setup-vllm`; ~3-5 min per family on 2 shared cores. Prints one JSON object per family,
then a summary object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from prfaas.integrations.vllm.tiny import INITIALIZER_RANGE, LLAMA, VOCAB_SIZE
from prfaas.serve.backends.vllm.child import vllm_environment, vllm_python
from prfaas.serve.config.deployment import free_port
from prfaas.serve.config.vllm_spec import VllmSpec
from provenance import git_sha, host

SHORT = "The lazy dog sleeps."
LONG = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
MAX_TOKENS = 12
START_TIMEOUT_S = 1200.0
SECRET = "vllm-families-benchmark-secret-0123"

#: the tiny llama's sizes (head dim 64: vLLM's CPU attention needs >= 64), any family's names
_BASE = {k: v for k, v in LLAMA.items() if k not in ("architectures", "model_type")}


def _family(architecture: str, model_type: str, **fields: Any) -> dict[str, Any]:
    return {**_BASE, "architectures": [architecture], "model_type": model_type, **fields}


_EXPERTS = {"num_local_experts": 4, "num_experts_per_tok": 2}
#: Families, config.json fields each.
FAMILIES: dict[str, dict[str, Any]] = {
    "qwen2": _family("Qwen2ForCausalLM", "qwen2"),
    "qwen3": _family("Qwen3ForCausalLM", "qwen3"),
    "mistral": _family("MistralForCausalLM", "mistral", sliding_window=None),
    "mistral-window": _family("MistralForCausalLM", "mistral", sliding_window=128),
    "qwen3-moe": _family(
        "Qwen3MoeForCausalLM",
        "qwen3_moe",
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    ),
    "phi3": _family("Phi3ForCausalLM", "phi3", sliding_window=None),
    # Gemma ties its embeddings (vLLM's Gemma loads no separate lm_head)
    "gemma": _family("GemmaForCausalLM", "gemma", tie_word_embeddings=True),
    "gemma2": _family(
        "Gemma2ForCausalLM",
        "gemma2",
        tie_word_embeddings=True,
        sliding_window=128,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "olmo2": _family("Olmo2ForCausalLM", "olmo2"),
    "granite": _family("GraniteForCausalLM", "granite"),
    # multi-head attention: a GPT-NeoX config names no KV head count (nor a head dim)
    "gpt-neox": {
        k: v
        for k, v in _family("GPTNeoXForCausalLM", "gpt_neox").items()
        if k not in ("num_key_value_heads", "head_dim")
    },
    "mixtral": _family("MixtralForCausalLM", "mixtral", **_EXPERTS),
    # partial rotary embedding (a quarter of each head), LayerNorm with bias
    "stablelm": _family(
        "StableLmForCausalLM", "stablelm", partial_rotary_factor=0.25, layer_norm_eps=1e-5
    ),
    # Granite-4.0-H: Mamba2 and attention layers, experts with a shared MLP
    "granitemoehybrid": _family(
        "GraniteMoeHybridForCausalLM",
        "granitemoehybrid",
        num_hidden_layers=4,
        layer_types=["mamba", "attention", "mamba", "attention"],
        mamba_n_heads=4,
        mamba_d_head=64,
        mamba_d_state=16,
        mamba_n_groups=1,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_chunk_size=64,
        num_local_experts=2,
        num_experts_per_tok=1,
        shared_intermediate_size=256,
        position_embedding_type="rope",
    ),
    "mamba": {
        "architectures": ["MambaForCausalLM"],
        "model_type": "mamba",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": 128,
        "state_size": 16,
        "num_hidden_layers": 2,
        "initializer_range": INITIALIZER_RANGE,
    },
}


def build(name: str, root: Path) -> Path:
    fields = root / f"{name}.json"
    fields.write_text(json.dumps(FAMILIES[name]))
    target = root / name
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", "--fields"]
    subprocess.run([*argv, str(fields), str(target)], check=True, capture_output=True)
    return target


def _healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether `url`/health answered 200 before `process` exited or the time ran out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    return False


def _text(url: str, model: str, prompt: str) -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    response = httpx.post(url + "/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    return dict(response.json())


def _streamed(url: str, model: str, prompt: str) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
    pieces = []
    with httpx.stream(
        "POST", url + "/v1/completions", json=body | {"stream": True}, timeout=600
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                pieces += [c.get("text", "") for c in json.loads(line[6:]).get("choices", [])]
    return "".join(pieces)


def _chat(url: str, model: str) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hello there."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=600)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def compare(name: str, root: Path) -> dict[str, Any]:
    """One family: prfaas's answers against `vllm serve`'s."""
    model_dir = build(name, root)
    started = time.monotonic()
    port, log = free_port(), root / f"{name}-up.log"
    env = os.environ | {"PRFAAS_TRANSFER_SECRET": SECRET}
    up_argv = [sys.executable, "-m", "prfaas", "up", "--backend", "vllm", "--quiet"]
    with log.open("wb") as out:
        up = subprocess.Popen(
            [*up_argv, "--model", str(model_dir), "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    reference = None
    result: dict[str, Any] = {"family": name, "architecture": FAMILIES[name]["architectures"][0]}
    try:
        url = f"http://127.0.0.1:{port}"
        if not _healthy(url, up, START_TIMEOUT_S):
            errors = [ln for ln in log.read_text().splitlines() if "error:" in ln]
            result["served"] = False
            result["refusal"] = errors[0] if errors else log.read_text()[-400:]
            return result
        result["served"] = True
        result["start_s"] = round(time.monotonic() - started, 1)
        ref_port = free_port()
        ref_argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.serve_main", "serve"]
        ref_argv += [str(model_dir), "--port", str(ref_port), "--served-model-name", name]
        ref_argv += ["--enforce-eager", "--max-model-len", "4096"]
        reference = subprocess.Popen(
            ref_argv,
            env=vllm_environment(VllmSpec()),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        ref_url = f"http://127.0.0.1:{ref_port}"
        if not _healthy(ref_url, reference, START_TIMEOUT_S):
            result["reference_failed"] = True
            return result
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        for label, prompt in (("short", SHORT), ("long", LONG)):
            ours, theirs = _text(url, model, prompt), _text(ref_url, name, prompt)
            expected = theirs["choices"][0]["text"]
            result[label] = {
                "path": ours["prfaas"]["path"],
                "prompt_tokens": ours["usage"]["prompt_tokens"],
                "kv_bytes": ours["prfaas"]["kv_bytes"],
                "text_equal": ours["choices"][0]["text"] == expected,
                "stream_equal": _streamed(url, model, prompt) == expected,
            }
        result["chat_equal"] = _chat(url, model) == _chat(ref_url, name)
        return result
    finally:
        _stop(up)
        if reference is not None:
            _stop(reference)
        result["wall_s"] = round(time.monotonic() - started, 1)


def _all_equal(result: dict[str, Any]) -> bool:
    checks = [result.get("chat_equal"), "error" not in result]
    checks += [
        result.get(k, {}).get(f) for k in ("short", "long") for f in ("text_equal", "stream_equal")
    ]
    return all(checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", metavar="FAMILY", help=", ".join(FAMILIES))
    names = parser.parse_args().families or list(FAMILIES)
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        parser.error(f"unknown family {unknown[0]!r} (one of {', '.join(FAMILIES)})")
    if not vllm_python().exists():
        print("no vLLM venv: run `make setup-vllm` first", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="prfaas-families-") as tmp:
        for name in names:
            try:
                result = compare(name, Path(tmp))
            except (httpx.HTTPError, KeyError, ValueError) as err:  # recorded, not fatal
                log = Path(tmp) / f"{name}-up.log"
                tail = log.read_text()[-600:] if log.exists() else ""
                result = {"family": name, "served": True, "error": repr(err), "log": tail}
            results.append(result)
            print(json.dumps(result), flush=True)
    served = [r for r in results if r["served"]]
    summary = {
        "summary": True,
        "git": git_sha(),
        "host": host(),
        "served_equal": [r["family"] for r in served if _all_equal(r)],
        "served_different": [r["family"] for r in served if not _all_equal(r)],
        "refused": {r["family"]: r["refusal"] for r in results if not r["served"]},
    }
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
