"""How well the two-constant roofline predicts the paper's measured Table 3, in and out of sample.

Prints JSON: the least-squares H200 constants fitted on all 24 cells, every cell's computed /
measured Phi_kv, and a leave-one-model-out check (fit on five models, predict the sixth) that
shows how much of the agreement is fitting and how much is architecture.

    .venv/bin/python benchmarks/prefill_model_accuracy.py
"""

from __future__ import annotations

import dataclasses
import json
import statistics

from prfaas.specs.calibration import MeasuredPhi, fit_prefill_constants, paper_cells
from prfaas.specs.catalog import get_chip
from prfaas.specs.perf import RooflineProfile, kv_throughput_gbps
from provenance import git_sha, host


def main() -> None:
    chip = get_chip("h200")
    cells = paper_cells("Table 3")
    fit = fit_prefill_constants(cells, chip, 8)

    def ratios(train: list[MeasuredPhi], test: list[MeasuredPhi]) -> list[float]:
        f = fit_prefill_constants(train, chip, 8)
        cal = dataclasses.replace(
            chip.calibration, prefill_mfu=f.prefill_mfu, prefill_overhead_s=f.prefill_overhead_s
        )
        fitted = dataclasses.replace(chip, calibration=cal)
        return [
            kv_throughput_gbps(RooflineProfile(c.model, fitted, 8), c.length_tokens) / c.phi_gbps
            for c in test
        ]

    in_sample = ratios(cells, cells)
    out_of_sample: dict[str, list[float]] = {}
    for name in sorted({c.model.name for c in cells}):
        held_out = [c for c in cells if c.model.name == name]
        train = [c for c in cells if c.model.name != name]
        out_of_sample[name] = [round(r, 3) for r in ratios(train, held_out)]
    flat_out = [r for rs in out_of_sample.values() for r in rs]

    def spread(rs: list[float]) -> dict[str, float]:
        return {
            "median_ratio": round(statistics.median(rs), 3),
            "worst_ratio": round(max(rs, key=lambda x: max(x, 1 / x)), 3),
        }

    print(
        json.dumps(
            {
                "benchmark": "prefill_model_accuracy",
                "git_sha": git_sha(),
                "host": host(),
                "fit": dataclasses.asdict(fit),
                "in_sample": spread(in_sample)
                | {
                    "cells": {
                        f"{c.model.name}@{c.length_tokens}": round(r, 3)
                        for c, r in zip(cells, in_sample, strict=True)
                    }
                },
                "leave_one_model_out": spread(flat_out) | {"cells": out_of_sample},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
