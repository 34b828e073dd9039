"""`prfaas plan --timing aic --search-parallelism` on chips beyond the paper's (issue 30): a
catalog chip added for aiconfigurator's systems (GB200) and a chip the scenario describes
itself, in a subprocess, to the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prfaas.specs import aic

needs_aic = pytest.mark.skipif(
    aic.aic_version() is None, reason="aiconfigurator-core not installed (make test installs it)"
)
SCENARIO = {
    "name": "gb200-prfaas-h100-nvl-pd",
    "model": "qwen3-235b",
    "prfaas": {"chip": "gb200", "num_gpus": 8, "gpus_per_instance": 8},
    "pd": {"chip": "h100-nvl", "num_gpus": 16, "gpus_per_instance": 8},
    "link_gbps": 100,
    "decode": {"slo_tokens_per_s": 30},
    "workload": {
        "input": {"lognormal": {"mu": 9.0, "sigma": 1.0, "min_tokens": 128, "max_tokens": "32K"}},
        "output": {"fixed_tokens": 512},
    },
    "chips": {
        "h100-nvl": {
            "display_name": "NVIDIA H100 NVL",
            "dense_bf16_tflops": 835.5,
            "hbm_gb": 94,
            "hbm_tb_per_s": 3.9,
            "relative_price": 1.9,
            "attention_efficiency": 0.65,
            "prefill_mfu": 0.187,
            "prefill_overhead_s": 0.386,
            "decode_mbu": 0.6,
            "decode_overhead_s": 0.005,
            "aic_system": "h100_sxm",
        }
    },
}


@needs_aic
def test_plan_searches_parallelism_on_a_new_chip_and_a_described_one(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    result = subprocess.run(
        [sys.executable, "-m", "prfaas", "plan", "--scenario", str(path), "--timing", "aic",
         "--search-parallelism", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    timing = report["timing"]
    assert timing["notes"] == []  # both timed by aiconfigurator, no fallback
    assert timing["prfaas"].startswith(f"aiconfigurator {aic.aic_version()} (sglang ")
    assert ", gb200, " in timing["prfaas"]
    assert ", h100_sxm, " in timing["pd"]
    assert report["prfaas_pd"]["lambda_max"] > 0
    # Priced by the chips' own prices: 8 x GB200 at 3.3 and 16 x H100 NVL at 1.9.
    assert report["prfaas_pd"]["price"] == pytest.approx(8 * 3.3 + 16 * 1.9)
