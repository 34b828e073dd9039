"""The shipped H200 constants are the least-squares fit of Table 3, reproducible by code."""

from __future__ import annotations

import dataclasses

import pytest

from prfaas.specs.calibration import MeasuredPhi, fit_prefill_constants, paper_cells
from prfaas.specs.catalog import get_chip
from prfaas.specs.chip import RooflineCalibration
from prfaas.specs.model import DenseMlp, GqaAttention, ModelSpec
from prfaas.specs.perf import RooflineProfile, kv_throughput_gbps


def test_catalog_h200_constants_are_the_table3_fit() -> None:
    chip = get_chip("h200")
    fit = fit_prefill_constants(paper_cells("Table 3"), chip, 8)
    assert fit.prefill_mfu == pytest.approx(chip.calibration.prefill_mfu, abs=0.001)
    assert fit.prefill_overhead_s == pytest.approx(chip.calibration.prefill_overhead_s, abs=0.001)


def test_fit_recovers_constants_it_generated() -> None:
    """Synthetic measurements from known constants come back out of the fit."""
    truth = RooflineCalibration(
        attention_efficiency=0.6,
        prefill_mfu=0.35,
        prefill_overhead_s=0.12,
        decode_mbu=0.5,
        decode_overhead_s=0.01,
    )
    chip = dataclasses.replace(get_chip("h100"), calibration=truth)
    model = ModelSpec(
        name="dense",
        hidden_size=4096,
        vocab_size=32000,
        mixers=(GqaAttention(num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128),),
        mlps=(DenseMlp(num_layers=32, intermediate_size=14336),),
    )
    profile = RooflineProfile(model, chip, 4)
    cells = [
        MeasuredPhi(model, n, kv_throughput_gbps(profile, n)) for n in (512, 4096, 32768, 131072)
    ]
    fit = fit_prefill_constants(cells, chip, 4)
    assert fit.prefill_mfu == pytest.approx(0.35, rel=0.01)
    assert fit.prefill_overhead_s == pytest.approx(0.12, abs=0.002)
    assert fit.rms_log_error < 0.01
