"""Accelerators: peak figures from vendor datasheets plus the two calibration constants of our
roofline timing model (see `perf` and docs/calibration.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RooflineCalibration:
    """How far real prefill and decode fall short of the datasheet, per chip.

    Prefill has two *fitted* constants: `prefill_mfu`, the fraction of dense bf16 peak that the
    weight matmuls reach, and `prefill_overhead_s`, the fixed cost of one prefill (scheduling,
    launches, tensor-parallel all-reduces, sampling). `attention_efficiency` is not fitted: it is
    the fraction of peak that published attention kernels (FlashAttention-2/3/4) reach on the
    chip, a datasheet-like figure. Decode: `decode_mbu` is the fraction of HBM bandwidth a decode
    step achieves and `decode_overhead_s` its fixed cost per step.
    """

    attention_efficiency: float
    prefill_mfu: float
    prefill_overhead_s: float
    decode_mbu: float
    decode_overhead_s: float


@dataclass(frozen=True, slots=True)
class ChipSpec:
    """One accelerator. FLOP/s are dense bf16 (no sparsity): the precision Table 3 was fitted
    in; fp8 checkpoints did not prefill measurably faster there (docs/calibration.md)."""

    name: str
    display_name: str
    dense_bf16_flops: float
    hbm_bytes: int
    hbm_bytes_per_s: float
    relative_price: float
    calibration: RooflineCalibration
    #: aiconfigurator's system holding this chip's kernel data (`h200_sxm`), None when it has
    #: none: the `aic` timing source times the chip only through it (`specs.aic`).
    aic_system: str | None = None
