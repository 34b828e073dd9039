"""Helpers of the simulator tests: small scenarios written to a temp dir."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

BASE = {
    "name": "tiny",
    "model": "prfaas-1t",
    "prfaas": {"chip": "h200", "num_gpus": 32, "gpus_per_instance": 8},
    "pd": {"chip": "h20", "num_gpus": 64, "gpus_per_instance": 8},
    "link_gbps": 100,
    "decode": {"slo_tokens_per_s": 40},
    "workload": {
        "input": {"lognormal": {"mu": 9.9, "sigma": 1.0, "min_tokens": 128, "max_tokens": "128K"}},
        "output": {"fixed_tokens": 64},
    },
    "arrivals": {"process": "gamma", "rate_per_s": 2.0, "cv": 2.0, "num_requests": 300},
    # Admission is on by default (issue 27); these fixtures test routing and the event loop
    # with every request admitted, so they turn it off explicitly.
    "simulation": {"seed": 3, "slo": {"ttft_s": 10, "tpot_s": 0.025}, "admission": {"mode": "off"}},
}


def write_scenario(tmp: Path, **updates: object) -> Path:
    body = {**BASE, **updates}
    path = tmp / "scenario.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def write_trace(tmp: Path, num: int = 200) -> Path:
    """Conversations: every 4th request extends the previous one's prefix."""
    lines = []
    for i in range(num):
        conv = i // 4
        turn = i % 4
        ids = [conv * 1000 + k for k in range(8 + 8 * turn)]
        lines.append(
            {
                "timestamp": i * 400,
                "input_length": len(ids) * 512 - 100,
                "output_length": 50,
                "hash_ids": ids,
            }
        )
    path = tmp / "trace.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path
