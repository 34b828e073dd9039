"""KV throughput of one prefill instance (paper Eq. 1) over models and lengths, beside the
paper's measured Table 3 / Table 5 values.

This is the argument of the whole paper in one table: a dense-attention model emits tens of Gbps
of KVCache per prefill instance, a hybrid one a few, which is what lets prefill leave the RDMA
domain of its decode cluster.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from prfaas.specs.catalog import paper_phi_gbps, profile_for
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec
from prfaas.specs.perf import kv_throughput_gbps


@dataclass(frozen=True, slots=True)
class KvThroughputRow:
    model: str
    chip: str
    gpus_per_instance: int
    length: int
    kv_bytes: int  # whole bytes (the profile interpolates a float)
    prefill_s: float
    phi_gbps: float
    paper_phi_gbps: float | None
    paper_table: str | None
    source: str

    @property
    def ratio_to_paper(self) -> float | None:
        """Computed / paper (1.0 = exact); None where the paper has no value."""
        if self.paper_phi_gbps is None:
            return None
        return self.phi_gbps / self.paper_phi_gbps


def kv_throughput_rows(
    models: Sequence[ModelSpec], chip: ChipSpec, gpus_per_instance: int, lengths: Sequence[int]
) -> list[KvThroughputRow]:
    rows = []
    for model in models:
        profile = profile_for(model, chip, gpus_per_instance)
        for length in lengths:
            paper = paper_phi_gbps(model.name, chip.name, gpus_per_instance, length)
            rows.append(
                KvThroughputRow(
                    model=model.name,
                    chip=chip.name,
                    gpus_per_instance=gpus_per_instance,
                    length=length,
                    kv_bytes=round(profile.cache_bytes(length)),
                    prefill_s=profile.prefill_s(length),
                    phi_gbps=kv_throughput_gbps(profile, length),
                    paper_phi_gbps=None if paper is None else paper[0],
                    paper_table=None if paper is None else paper[1],
                    source=profile.source,
                )
            )
    return rows


@dataclass(frozen=True, slots=True)
class PaperAgreement:
    """How rows compare with one of the paper's tables: spread of computed/paper ratios."""

    table: str
    num_cells: int
    median_ratio: float
    worst_ratio: float  # the ratio farthest from 1 (in log terms), as computed/paper

    @classmethod
    def per_table(cls, rows: Sequence[KvThroughputRow]) -> list[PaperAgreement]:
        by_table: dict[str, list[float]] = {}
        for row in rows:
            if row.paper_table is not None and row.ratio_to_paper is not None:
                by_table.setdefault(row.paper_table, []).append(row.ratio_to_paper)
        return [
            cls(table, len(r), statistics.median(r), max(r, key=lambda x: max(x, 1 / x)))
            for table, r in sorted(by_table.items())
        ]
