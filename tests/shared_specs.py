"""What test folders share about specs: the skip where aiconfigurator is not installed, and a
chip as a user describes it in a scenario or a deployment file."""

from __future__ import annotations

from typing import Any

import pytest

from prfaas.specs import aic

needs_aic = pytest.mark.skipif(
    aic.aic_version() is None, reason="aiconfigurator-core not installed (make test installs it)"
)

#: An H100 NVL: not in the catalog, timed by H100 SXM's aiconfigurator data.
H100_NVL: dict[str, Any] = {
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
