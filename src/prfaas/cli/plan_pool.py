"""`prfaas plan` on a trace (pool-aware, the default): the hits the deployment's pools would
see (scheduler.hit_model) beside the ideal replay's, for PrfaaS-PD and homogeneous PD."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table

from prfaas.cli.output import Output
from prfaas.scheduler.hit_model import PoolAwarePoint


def points_json(points: list[PoolAwarePoint]) -> list[dict[str, Any]]:
    return [asdict(p) for p in points]


def render(points: list[PoolAwarePoint], out: Output) -> None:
    table = Table(title="Pool-aware plan (per-instance pools, snapshot policy, placement)")
    for name in ("deployment", "hit ideal", "hit predicted", "Lambda_max ideal", "Lambda_max"):
        table.add_column(name, justify="right")
    table.add_column("N_prfaas / N_p / N_d, t", justify="right")
    for p in points:
        t = "-" if p.threshold_tokens is None else str(p.threshold_tokens)
        table.add_row(
            p.deployment,
            f"{p.ideal_hit_fraction:.1%}",
            f"{p.predicted_hit_fraction:.1%}",
            f"{p.ideal_lambda_max:.3f}",
            f"{p.lambda_max:.3f}",
            f"{p.n_prfaas} / {p.n_p} / {p.n_d}, {t}",
        )
    out.table(table)
