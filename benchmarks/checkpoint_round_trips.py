"""The router's calls to its instances before the first token, for a real checkpoint served by
torch instances (issue 25 point 4: the router tokenizes a checkpoint's prompts itself).

    python benchmarks/checkpoint_round_trips.py [--tokens 1024,4000] [--save out.json]

A PD-P instance and a PD-D instance (`prfaas instance`, torch backend) serve a tiny
checkpoint directory written here: `tiny-qwen3-next`'s random weights and the vLLM test
checkpoints' byte-level `tokenizer.json` with a chat template (so a completion prompt is one
user turn of it, as a chat model's is on the torch backend). The router runs from a file
whose instance ports are counting proxies (`counting_proxy`): one warm-up request, then one
streamed completion per length, and what it made before its first token (`round_trips`:
calls, how many one after another, bytes each way). `router_overhead.py` counts the same on
emulated instances, whose prompts are the byte tokenizer's. Run it on two commits (a
checkout's `.venv`, or PYTHONPATH at its `src`) for before and after; the results go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from counting_proxy import CountingProxy, measured
from load_client import Target, completion_body, filler, prompt
from provenance import emit, git_sha, host
from router_stacks import Processes, free_port

NAMES = {"pdp-0": "pd-prefill", "pdd-0": "pd-decode"}
SERVED_NAME = "tiny-checkpoint"
START_TIMEOUT_S = 240.0
OUTPUT_TOKENS = 4

WRITE_CHECKPOINT = """
import sys
from pathlib import Path
from prfaas.engine.models import build_preset
from prfaas.integrations.vllm.tiny import save_byte_tokenizer
out = Path(sys.argv[1])
build_preset("tiny-qwen3-next").model.save_pretrained(out)
save_byte_tokenizer(out)
"""


def deployment_yaml(model: Path, router_port: int, http: dict[str, int],
                    transfer: dict[str, int]) -> str:  # fmt: skip
    lines = [
        f"model: {model}",
        f"served_model_name: {SERVED_NAME}",
        "block_tokens: 16",
        "threshold_tokens: 1000000000",
        f"router: {{host: 127.0.0.1, port: {router_port}}}",
        "rebalance: {enabled: false}",
        "instances:",
    ]
    for name, role in NAMES.items():
        lines.append(
            f"  - {{name: {name}, role: {role}, cluster: pd, backend: torch, capacity_mib: 512, "
            f"http_port: {http[name]}, transfer_port: {transfer[name]}}}"
        )
    return "\n".join(lines) + "\n"


async def wait_healthy(procs: Processes, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            for name, child in procs.children.items():
                if child.poll() is not None:
                    raise RuntimeError(f"{name} exited: {procs.log_tail(name)}")
            try:
                if (await client.get(url + "/health")).json().get("status") == "ok":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            await asyncio.sleep(0.5)
    raise RuntimeError(f"{url} was not healthy within {START_TIMEOUT_S:.0f} s")


async def count(work: Path, lengths: list[int]) -> dict[str, Any]:
    model = work / SERVED_NAME
    subprocess.run([sys.executable, "-c", WRITE_CHECKPOINT, str(model)], check=True)
    http = {n: free_port() for n in NAMES}
    transfer = {n: free_port() for n in NAMES}
    router_port = free_port()
    own = work / "instances.yaml"
    own.write_text(deployment_yaml(model, router_port, http, transfer))
    env = {**os.environ, "PRFAAS_TRANSFER_SECRET": os.urandom(24).hex(), "OMP_NUM_THREADS": "1"}
    prfaas = [sys.executable, "-m", "prfaas"]
    rows: dict[str, Any] = {}
    with Processes(work) as procs:
        for name in NAMES:
            procs.start(name, [*prfaas, "instance", str(own), "--name", name], env)
        for name in NAMES:  # a proxy connects upstream at once: the instances first
            await wait_healthy(procs, f"http://127.0.0.1:{http[name]}")
        proxies = [CountingProxy(name, port) for name, port in http.items()]
        for proxy in proxies:
            await proxy.start()
        routed = work / "router.yaml"
        called = {proxy.name: proxy.port for proxy in proxies}
        routed.write_text(deployment_yaml(model, router_port, called, transfer))
        procs.start("router", [*prfaas, "router", str(routed), "--quiet"], env)
        await wait_healthy(procs, f"http://127.0.0.1:{router_port}")
        target = Target("127.0.0.1", router_port, timeout_s=300.0)
        text = filler(max(lengths))
        for index, num_tokens in enumerate(lengths):
            body = completion_body(SERVED_NAME, prompt(num_tokens, 2 * index, text), OUTPUT_TOKENS)
            await target.complete(body)  # warm-up: connections, the router's tokenizer
            body = completion_body(
                SERVED_NAME, prompt(num_tokens, 2 * index + 1, text), OUTPUT_TOKENS
            )
            outcome = await target.complete(body)
            rows[str(num_tokens)] = measured(proxies, outcome)
        target.close()
        for proxy in proxies:
            await proxy.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1024,4000", help="prompt lengths (characters)")
    ap.add_argument("--save", help="also write the JSON here")
    args = ap.parse_args(argv)
    lengths = [int(x) for x in args.tokens.split(",")]
    start_s = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="checkpoint-round-trips-") as tmp:
        rows = asyncio.run(count(Path(tmp), lengths))
    result = {
        "benchmark": "checkpoint_round_trips",
        "config": {"tokens": lengths, "output_tokens": OUTPUT_TOKENS, "path": "pd-p"},
        "git_sha": git_sha(),
        "host": host(),
        "wall_s": round(time.monotonic() - start_s, 1),
        "round_trips": rows,
    }
    emit(result, args.save)


if __name__ == "__main__":
    main()
