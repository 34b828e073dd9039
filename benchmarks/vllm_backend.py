"""vLLM behind prfaas: one vLLM instance vs PrfaaS-PD with vLLM instances over an emulated link.

    .venv/bin/python benchmarks/vllm_backend.py [--requests 12] [--rate-gbps 0.2]

The same trace slice (the first requests of ../shared/traces' Mooncake conversation trace,
input lengths divided by 8 and capped at 3,500 tokens, 16 output tokens, sent one after the
other) goes (a) to one plain `vllm serve` and (b) through `prfaas up` with a vLLM PrfaaS
prefill instance and a vLLM PD decode instance (t = 0: every request crosses the link, paced
by the token bucket at --rate-gbps). Per request it records the end-to-end time of both, the
KV bytes the connector shipped against `prfaas kv-throughput --model DIR`'s S_kv for that
length (the same ModelSpec), and from the connector's per-transfer timing how much of the
transfer window overlapped the prefill: (prefill end - first slice) / (commit - first slice).

Needs `make setup-vllm`. Prints one JSON object (docs/benchmarks.md records a run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from prfaas.serve.backends.vllm.child import vllm_environment, vllm_python
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    InstanceRole,
    InstanceSpec,
    LinkShaping,
    LinkSpec,
    RebalanceSpec,
    RouterSpec,
    free_port,
)
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.launch.launcher import Launcher
from prfaas.specs.catalog import resolve_model
from provenance import git_sha, host

TRACE = (
    Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
)
TRACE_FALLBACK = Path("/work/shared/traces/mooncake_conversation_trace.jsonl")
OUTPUT_TOKENS = 16
MODEL_NAME = "tiny-llama"
SERVED_KV_DTYPE_BYTES = 4  # the deployment runs the checkpoint in float32
VLLM_CPU_BLOCK_TOKENS = 128  # vLLM's block on CPU; the connector ships whole blocks


def _lengths(count: int) -> list[int]:
    path = TRACE if TRACE.exists() else TRACE_FALLBACK
    rows = [json.loads(line) for line in path.read_text().splitlines()[:count]]
    return [min(max(row["input_length"] // 8, 32), 3500) for row in rows]


def _prompt(length_tokens: int, salt: int) -> str:
    """`length_tokens - 1` bytes of text (byte tokenizer: one token a byte, plus <bos>)."""
    words = " ".join(f"r{salt}w{i}" for i in range(length_tokens))
    return words[: length_tokens - 1]


def _serve_reference(model_dir: Path, port: int) -> subprocess.Popen[bytes]:
    env = vllm_environment(VllmSpec(kv_cache_gib=1))
    argv = [str(vllm_python()), "-m", "prfaas.integrations.vllm.serve_main", "serve"]
    argv += [str(model_dir), "--port", str(port), "--served-model-name", MODEL_NAME]
    argv += ["--enforce-eager", "--max-model-len", "4096", "--dtype", "float32"]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _deployment(model_dir: Path, rate_gbps: float) -> Deployment:
    def vllm(name: str, role: InstanceRole, cluster: str) -> InstanceSpec:
        return InstanceSpec(name=name, role=role, cluster=cluster, backend=Backend.VLLM)

    return Deployment(
        model=str(model_dir),
        served_model_name=MODEL_NAME,
        block_tokens=64,
        threshold_tokens=0,
        router=RouterSpec(port=0, request_timeout_s=600, decode_reuse=False),
        link=LinkSpec(rate_gbps=rate_gbps, rtt_ms=0, shaping=LinkShaping.TOKEN_BUCKET),
        rebalance=RebalanceSpec(enabled=False),
        vllm=VllmSpec(dtype="float32"),
        instances=(
            vllm("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
            vllm("pdd-0", InstanceRole.PD_DECODE, "pd"),
        ),
    )


def _complete(url: str, prompt: str) -> tuple[dict[str, Any], float]:
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": OUTPUT_TOKENS, "temperature": 0}
    started = time.monotonic()
    response = httpx.post(url + "/v1/completions", json=body, timeout=600)
    response.raise_for_status()
    return dict(response.json()), time.monotonic() - started


def _wait(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--rate-gbps", type=float, default=0.2)
    args = parser.parse_args()
    os.environ.setdefault("PRFAAS_TRANSFER_SECRET", "vllm-bench-secret-0123456789")
    work = Path(tempfile.mkdtemp(prefix="prfaas-vllm-bench-"))
    model_dir = work / "llama"
    subprocess.run(
        [str(vllm_python()), "-m", "prfaas.integrations.vllm.tiny", "llama", str(model_dir)],
        check=True,
        capture_output=True,
    )
    spec = resolve_model(str(model_dir))
    # kv-throughput's S_kv assumes 2-byte KV; vLLM keeps this checkpoint's KV in float32
    served = dataclasses.replace(
        spec,
        mixers=tuple(
            dataclasses.replace(g, kv_dtype_bytes=SERVED_KV_DTYPE_BYTES)
            if hasattr(g, "kv_dtype_bytes")
            else g
            for g in spec.mixers
        ),
    )
    ref_port = free_port()
    reference = _serve_reference(model_dir, ref_port)
    launcher = Launcher(_deployment(model_dir, args.rate_gbps))
    rows: list[dict[str, Any]] = []
    try:
        launcher.start()
        launcher.wait_healthy()
        ref_url = f"http://127.0.0.1:{ref_port}"
        _wait(ref_url, 600)
        for i, length in enumerate(_lengths(args.requests)):
            prompt = _prompt(length, i)
            single, single_s = _complete(ref_url, prompt)
            via, via_s = _complete(launcher.url, prompt)
            tokens = via["usage"]["prompt_tokens"]
            s_kv = spec.kv_bytes_per_token() * tokens + spec.state_bytes(tokens)
            padded = math.ceil(tokens / VLLM_CPU_BLOCK_TOKENS) * VLLM_CPU_BLOCK_TOKENS
            rows.append(
                {
                    "prompt_tokens": tokens,
                    "single_e2e_s": round(single_s, 3),
                    "prfaas_e2e_s": round(via_s, 3),
                    "same_text": single["choices"][0]["text"] == via["choices"][0]["text"],
                    "kv_bytes": via["prfaas"]["kv_bytes"],
                    "s_kv_bytes": s_kv,
                    "s_kv_served_bytes": served.kv_bytes_per_token() * tokens
                    + served.state_bytes(tokens),
                    "whole_blocks_bytes": served.kv_bytes_per_token() * padded
                    + served.state_bytes(tokens),
                }
            )
        pid = launcher.children["prfaas-0"].pid
        status = json.loads(Path(f"/tmp/prfaas-vllm-prfaas-0-{pid}.json").read_text())
    finally:
        reference.send_signal(signal.SIGTERM)
        launcher.stop()
        reference.wait(timeout=30)
    overlaps = []
    for t in status["transfers"]:
        window = t["completed_s"] - t["first_slice_s"]
        if t["error"] is None and window > 0:
            overlaps.append((t["finish_called_s"] - t["first_slice_s"]) / window)

    def ratios(key: str) -> dict[str, float]:
        values = [r["kv_bytes"] / r[key] for r in rows]
        return {"min": round(min(values), 4), "max": round(max(values), 4)}

    print(
        json.dumps(
            {
                "benchmark": "vllm_backend",
                "git": git_sha(),
                "host": host(),
                "model": "tiny llama (2 layers, 1 KV head, head dim 64, float32)",
                "rate_gbps": args.rate_gbps,
                "requests": rows,
                "all_same_text": all(r["same_text"] for r in rows),
                # kv-throughput's S_kv (2-byte KV), at the served dtype, and at the served
                # dtype in whole 128-token blocks (what the connector ships)
                "kv_bytes_over_s_kv": ratios("s_kv_bytes"),
                "kv_bytes_over_s_kv_served": ratios("s_kv_served_bytes"),
                "kv_bytes_over_whole_blocks": ratios("whole_blocks_bytes"),
                "overlap_fraction": {
                    "mean": sum(overlaps) / len(overlaps) if overlaps else None,
                    "n": len(overlaps),
                },
                "single_e2e_s_total": round(sum(r["single_e2e_s"] for r in rows), 3),
                "prfaas_e2e_s_total": round(sum(r["prfaas_e2e_s"] for r in rows), 3),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
