"""`prfaas demo`: the default deployment, a mix of short and long prompts, and why each went where.

Brings the deployment up (`Launcher`), sends short prompts, long prompts, and long prompts that
share a prefix with an earlier one, through the OpenAI API, then prints per request its path
(PrfaaS or PD-P), the scheduler's reason, the prefix hit, the bytes of a cached prefix moved
across clusters first (torch backend), the KV bytes that crossed from prefill to decode, and
TTFT; then a summary per path and a clean shutdown. `--serve` keeps it up. A preset model
(random weights) gets a one-line notice; `--model smollm2-135m` serves the real checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from prfaas.serve.config.deployment import Deployment
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.launch.startup import wait_with_progress
from prfaas.serve.launch.supervisor import EXIT_STOPPED, Supervisor
from prfaas.specs.presets import PRESETS, random_weights_notice

# Long enough (~1,000 bytes: ~200 SmolLM2 tokens) to pass t = 96 with either tokenizer.
DOC_A = "PrfaaS offloads long-context prefill to a remote cluster of compute-dense chips. " * 12
DOC_B = "Commodity Ethernet carries the KVCache of hybrid models between datacenters. " * 12

PROMPTS = (
    ("short", "What is PrfaaS?"),
    ("long", DOC_A),
    ("long, shares A", DOC_A + "Question: why offload?"),
    ("short", "Define TTFT."),
    ("long", DOC_B),
    ("long, shares A", DOC_A + "Question: what crosses the link?"),
    ("short", "Hi"),
    ("long, repeat A", DOC_A),
)


@dataclass(frozen=True, slots=True)
class DemoRow:
    kind: str
    prompt_tokens: int
    path: str
    reason: str
    hit_tokens: int
    moved_bytes: int
    kv_bytes: int
    ttft_s: float


def _send(client: httpx.Client, model: str, prompt: str) -> dict[str, Any]:
    body = {"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0}
    response = client.post("/v1/completions", json=body)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def _run_requests(launcher: Launcher) -> list[DemoRow]:
    rows = []
    model = launcher.deployment.model_name
    with httpx.Client(base_url=launcher.url, timeout=60) as client:
        for kind, prompt in PROMPTS:
            data = _send(client, model, prompt)
            info = data["prfaas"]
            rows.append(
                DemoRow(
                    kind,
                    data["usage"]["prompt_tokens"],
                    info["path"],
                    info["reason"],
                    info["hit_tokens"],
                    info.get("moved_kv_bytes", 0),
                    info["kv_bytes"],
                    info["ttft_s"],
                )
            )
            time.sleep(0.3)  # let the router pull the cache events before the next request
    return rows


def _print(rows: list[DemoRow], threshold_tokens: int) -> None:
    print(f"\nthreshold t = {threshold_tokens} uncached tokens\n")
    print(
        f"{'#':>2} {'request':15} {'tokens':>6} {'path':7} {'reason':28} "
        f"{'hit':>5} {'moved':>8} {'KV bytes':>9} {'TTFT ms':>8}"
    )
    for i, r in enumerate(rows):
        print(
            f"{i:>2} {r.kind:15} {r.prompt_tokens:>6} {r.path:7} {r.reason:28} "
            f"{r.hit_tokens:>5} {r.moved_bytes:>8,} {r.kv_bytes:>9,} {r.ttft_s * 1e3:>8.1f}"
        )
    print("\nsummary")
    for path in ("prfaas", "pd-p"):
        mine = [r for r in rows if r.path == path]
        if not mine:
            continue
        ttft_ms = sum(r.ttft_s for r in mine) / len(mine) * 1e3
        kv = sum(r.kv_bytes for r in mine)
        where = "over the inter-cluster link" if path == "prfaas" else "within the PD cluster"
        print(
            f"  {path:7} {len(mine)} requests, mean TTFT {ttft_ms:.1f} ms, {kv:,} KV bytes {where}"
        )
    moved = [r for r in rows if r.moved_bytes]
    if moved:
        total = sum(r.moved_bytes for r in moved)
        print(
            f"  moves   {len(moved)} cached prefixes, {total:,} bytes over the inter-cluster link"
        )


def run_demo(deployment: Deployment, *, keep_serving: bool = False) -> int:
    """The demo; with `keep_serving`, then supervise until stopped (the exit code of
    `prfaas up`, serve.launch.supervisor)."""
    launcher = Launcher(deployment)
    started = time.monotonic()
    code = EXIT_STOPPED
    launcher.start()
    try:
        wait_with_progress(launcher, launcher.start_timeout_s)
        print(f"deployment up in {time.monotonic() - started:.1f} s at {launcher.url}/v1")
        if deployment.model in PRESETS:
            print(random_weights_notice(deployment.model))
        rows = _run_requests(launcher)
        _print(rows, deployment.threshold_tokens)
        if keep_serving:
            print(f"\nserving at {launcher.url}/v1 (Ctrl-C to stop)")
            code = Supervisor(launcher).run()
    finally:
        launcher.stop()
    print(f"\nstopped cleanly after {time.monotonic() - started:.1f} s")
    return code
