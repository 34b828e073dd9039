"""`prfaas simulate --slo-capacity`: each policy's SLO capacity (sim.capacity), then every
policy across a load sweep of the first policy's capacity, as a table, JSON and a plot."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import typer
from rich.table import Table

from prfaas.cli.output import Format, Output, progress_bar
from prfaas.planner.scenario import ScenarioFile
from prfaas.sim.capacity import (
    SLO_TARGET,
    CapacityResult,
    LoadPoint,
    capacity_json,
    capacity_sweep,
    slo_capacity,
)
from prfaas.specs.errors import SpecError

DEFAULT_LOAD_FACTORS = "0.5,0.75,1,1.25,1.5,2"


def parse_factors(text: str) -> list[float]:
    try:
        factors = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"--load-factors: not a list of numbers: {text!r}") from None
    if not factors or not all(math.isfinite(f) and f > 0 for f in factors):
        raise SpecError("--load-factors: give positive numbers, e.g. 0.5,1,2")
    return factors


def _render(results: list[CapacityResult], rows: list[LoadPoint], out: Output) -> None:
    table = Table(title=f"SLO capacity (>= {SLO_TARGET:.0%} of requests within the SLO)")
    for name in ("policy", "capacity (req/s)", "time scale", "probes"):
        table.add_column(name, justify="right")
    for r in results:
        cap = "-" if r.capacity_per_s is None else f"{r.capacity_per_s:.3f}"
        scale = "-" if r.time_scale is None else f"{r.time_scale:.4g}"
        table.add_row(r.policy, cap, scale, str(len(r.probes)))
    out.table(table)
    sweep = Table(title=f"Load sweep (x the SLO capacity of {results[0].policy})")
    for name in ("load", "offered/s", "policy", "goodput/s", "in SLO", "rejected", "TTFT P90"):
        sweep.add_column(name, justify="right")
    for p in rows:
        sweep.add_row(
            f"{p.load_factor or 0:.2f}x",
            f"{p.offered_per_s:.3f}",
            p.policy,
            f"{p.goodput_per_s:.3f}",
            f"{p.slo_fraction:.1%}",
            f"{p.rejection_rate:.1%}",
            "-" if p.ttft_p90_s is None else f"{p.ttft_p90_s:.2f}",
        )
    out.table(sweep)


@dataclass(frozen=True, slots=True)
class SweepOptions:
    load_factors: str
    tolerance: float
    fmt: Format
    plot_dir: Path | None


def run(
    body: ScenarioFile,
    base_dir: Path,
    where: str,
    policies: list[str | None],
    options: SweepOptions,
) -> None:
    factors = parse_factors(options.load_factors)
    as_json, plot_dir = options.fmt is Format.JSON, options.plot_dir
    names = [p or (body.simulation.policy if body.simulation else "prfaas") for p in policies]
    with progress_bar() as bar:
        task = bar.add_task("searching", total=None)

        def tick(name: str, _: float) -> None:
            bar.update(task, description=f"simulating {name}")

        results = [
            slo_capacity(body, base_dir, where, name, rel_tol=options.tolerance, progress=tick)
            for name in names
        ]
        rows = capacity_sweep(
            body, base_dir, where, results[0], load_factors=factors, policies=names, progress=tick
        )
    if as_json:
        typer.echo(json.dumps(capacity_json(results, rows), indent=2))
    else:
        _render(results, rows, Output(options.fmt))
    if plot_dir is not None:
        from prfaas.sim.capacity_plot import write_capacity_plot

        typer.echo(f"wrote {write_capacity_plot(results, rows, plot_dir)}", err=as_json)
