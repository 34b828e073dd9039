"""Fitting a chip's two prefill constants (mfu, overhead_s) to measured KV throughputs.

The roofline of `perf` has exactly two free prefill constants per chip, shared by every model.
We fit them by least squares on log(Phi_computed / Phi_measured) over all measured cells, so a
cell 2x too high costs as much as one 2x too low and short and long prompts weigh the same.
The search is a 2-D grid, zoomed three times around the best point: dependable (no starting
point to choose) and fast enough (~0.1 s for the 24 cells of the paper's Table 3).

This is how the shipped H200 constants in data/chips.yaml were obtained; a test re-runs the fit
and checks the catalog still holds its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prfaas.specs.catalog import get_model, paper_rows
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class MeasuredPhi:
    """One measured cell: a model prefilling `length_tokens` at `phi_gbps`."""

    model: ModelSpec
    length_tokens: int
    phi_gbps: float


def paper_cells(table: str) -> list[MeasuredPhi]:
    """Every Phi_kv the paper measured in `table` ("Table 3"), as fit inputs."""
    return [
        MeasuredPhi(get_model(row.model), length, phi)
        for row in paper_rows()
        if row.table == table
        for length, phi in row.phi_gbps.items()
    ]


@dataclass(frozen=True, slots=True)
class PrefillFit:
    prefill_mfu: float
    prefill_overhead_s: float
    rms_log_error: float


def fit_prefill_constants(
    cells: Sequence[MeasuredPhi], chip: ChipSpec, gpus_per_instance: int
) -> PrefillFit:
    if len(cells) < 2:
        raise ValueError("need at least two measured cells to fit two constants")
    peak = gpus_per_instance * chip.dense_bf16_flops
    eff = chip.calibration.attention_efficiency
    matmul_s = np.array([c.model.matmul_flops(c.length_tokens) / peak for c in cells])
    mixing_s = np.array([c.model.mixing_flops(c.length_tokens) / (peak * eff) for c in cells])
    bits = np.array([8.0 * c.model.cache_bytes(c.length_tokens) for c in cells])
    log_measured = np.log(np.array([c.phi_gbps * 1e9 for c in cells]))

    def log_errors(inv_mfu: np.ndarray, overhead: np.ndarray) -> np.ndarray:
        seconds = overhead[..., None] + inv_mfu[..., None] * matmul_s + mixing_s
        errors: np.ndarray = np.log(bits / seconds) - log_measured
        return errors

    inv_lo, inv_hi, oh_lo, oh_hi = 1.0, 50.0, 0.0, 2.0
    for _ in range(4):
        inv_grid, oh_grid = np.meshgrid(
            np.linspace(inv_lo, inv_hi, 201), np.linspace(oh_lo, oh_hi, 201), indexing="ij"
        )
        cost = np.sum(log_errors(inv_grid, oh_grid) ** 2, axis=-1)
        i, j = np.unravel_index(np.argmin(cost), cost.shape)
        best_inv, best_oh = float(inv_grid[i, j]), float(oh_grid[i, j])
        inv_step, oh_step = (inv_hi - inv_lo) / 20, (oh_hi - oh_lo) / 20
        inv_lo, inv_hi = max(1.0, best_inv - inv_step), best_inv + inv_step
        oh_lo, oh_hi = max(0.0, best_oh - oh_step), best_oh + oh_step
    rms = float(np.sqrt(np.mean(log_errors(np.array(best_inv), np.array(best_oh)) ** 2)))
    return PrefillFit(1.0 / best_inv, best_oh, rms)
