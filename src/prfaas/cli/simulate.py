"""`prfaas simulate`: replay a scenario's arrivals (or a trace) through the scheduler and the
modelled clusters; one policy, or several side by side on the same arrivals (`--compare`).
`--timing`, `--engine`, `--search-parallelism` and `--one-pd-shape` are `prfaas plan`'s options
through its own code (`cli.plan.with_timing`, `planner.parallel.ShapeSearch`), so the plan
simulated is the plan `prfaas plan` reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from prfaas.cli import checks
from prfaas.cli.output import (
    Format,
    FormatOption,
    JsonOption,
    Output,
    ScenarioOption,
    progress_bar,
    resolve_format,
)
from prfaas.cli.plan import (
    EngineOption,
    EngineRulesOption,
    OnePdShapeOption,
    SearchOption,
    TimingOption,
    shape_search,
    with_timing,
)
from prfaas.planner.parallel import ShapeSearch
from prfaas.planner.scenario import (
    AdmissionFile,
    RebalanceFile,
    ScenarioFile,
    SimulationFile,
    read_scenario_file,
)
from prfaas.sim.api import SimRun, simulate_body, with_trace
from prfaas.sim.sweep import SweepRow, saturated, saturation, sweep_json, sweep_time_scales
from prfaas.specs.errors import SpecError


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


#: The report's roles (`SimReport.shapes`) as the table names them.
ROLE_LABELS = {"prfaas": "PrfaaS", "pd_p": "PD-P", "pd_d": "PD-D"}


def _render(runs: list[SimRun], out: Output) -> None:
    table = Table(title="Simulation")
    table.add_column("")
    for run in runs:
        table.add_column(run.report.policy, justify="right")
    rows: list[tuple[str, list[str]]] = []
    reports = [r.report for r in runs]
    rows.append(
        (
            "N_prfaas / N_p / N_d",
            [
                f"{r.deployment['n_prfaas']} / {r.deployment['n_p']} / {r.deployment['n_d']}"
                for r in reports
            ],
        )
    )
    rows.append(("plan (trace mode)", [r.plan_mode for r in reports]))
    rows.append(
        (
            "completed / failed",
            [f"{r.summary.num_completed} / {r.summary.num_failed}" for r in reports],
        )
    )
    rows.append(("throughput (req/s)", [_fmt(r.summary.request_throughput_per_s) for r in reports]))
    rows.append(("goodput (req/s)", [_fmt(r.summary.goodput_per_s) for r in reports]))
    for name in ("ttft_s", "e2e_s"):
        rows.append(
            (
                f"{name[:-2].upper()} mean / P50 / P90 / P99 (s)",
                [
                    " / ".join(
                        _fmt(getattr(getattr(r.summary, name), q))
                        for q in ("mean", "median", "p90", "p99")
                    )
                    for r in reports
                ],
            )
        )
    rows.append(
        (
            "TPOT mean / P90 (ms)",
            [
                f"{_fmt((r.summary.tpot_s.mean or 0) * 1e3, '.1f')} / "
                f"{_fmt((r.summary.tpot_s.p90 or 0) * 1e3, '.1f')}"
                for r in reports
            ],
        )
    )
    rows.append(
        ("paths", [", ".join(f"{k} {v}" for k, v in r.summary.paths.items()) for r in reports])
    )
    rows.append(
        (
            "link util / peak backlog (GB)",
            [f"{r.link_mean_utilisation:.1%} / {r.link_peak_backlog_gb:.2f}" for r in reports],
        )
    )
    rows.append(("prefix hit (tokens)", [f"{r.prefix_hit_fraction:.1%}" for r in reports]))
    rows.append(
        (
            "rejected / deferrals",
            [f"{sum(r.rejections.values())} / {r.num_deferrals}" for r in reports],
        )
    )
    rows.append(("slow-loop actions", [str(len(r.actions)) for r in reports]))
    for label, cells in rows:
        table.add_row(label, *cells)
    out.table(table)
    for r in reports:
        out.note(f"{r.policy} reasons: " + ", ".join(f"{k} {v}" for k, v in r.reasons.items()))
    for role, label in ROLE_LABELS.items():
        shape = reports[0].shapes[role]
        out.note(
            f"{label}: {shape['num_instances']} x{shape['gpus_per_instance']} "
            f"({shape['num_gpus']} GPUs), timing {shape['source']}"
        )
    for note in reports[0].notes:
        out.note(note)


PolicyOption = Annotated[
    str | None,
    typer.Option("--policy", "-p", help="prfaas, homogeneous, naive, fixed or dynamo."),
]
CompareOption = Annotated[
    str | None,
    typer.Option("--compare", help="Comma-separated policies to run on the same arrivals."),
]
TraceOption = Annotated[
    Path | None, typer.Option("--trace", help="Replay a Mooncake-format trace instead.")
]
PlotDirOption = Annotated[
    Path | None, typer.Option("--plot-dir", help="Write timeline and TTFT PNGs into DIR.")
]
TimeScaleOption = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        help="Multiply trace inter-arrival gaps, in (0, 1000].",
        callback=checks.time_scale,
    ),
]
RebalanceOption = Annotated[
    float | None,
    typer.Option(
        "--rebalance-period",
        help="Run the slow loop every S >= 1 seconds (prfaas policy).",
        callback=checks.rebalance_period,
    ),
]
TimeScalesOption = Annotated[
    str | None,
    typer.Option(
        "--time-scales",
        help="Comma-separated trace time scales: run every policy at each (a load sweep).",
    ),
]

AdmissionOption = Annotated[
    str | None,
    typer.Option(
        "--admission",
        help="Admission control: off, shed (reject what would miss the TTFT SLO) or defer.",
    ),
]
AdmissionMarginOption = Annotated[
    float | None,
    typer.Option(
        "--admission-margin",
        help="Refuse when predicted TTFT > SLO x (1 + this) (default 0).",
        callback=checks.non_negative,
    ),
]
SloCapacityOption = Annotated[
    bool,
    typer.Option(
        "--slo-capacity",
        help="Find each policy's SLO capacity (>= 99% in SLO), then sweep every policy across "
        "--load-factors x the first policy's capacity.",
    ),
]
SaturationSeedsOption = Annotated[
    int | None,
    typer.Option(
        "--saturation-seeds",
        min=2,
        help="Estimate each policy's saturation over N seeds: a value with a 95% interval.",
    ),
]
CapacityToleranceOption = Annotated[
    float,
    typer.Option(
        "--capacity-tolerance",
        help="Stop the --slo-capacity bisection when the bracket is within this fraction.",
        callback=checks.unit_interval,
    ),
]
LoadFactorsOption = Annotated[
    str,
    typer.Option("--load-factors", help="Loads of the --slo-capacity sweep, x the capacity."),
]


def with_admission(body: ScenarioFile, mode: str | None, margin: float | None) -> ScenarioFile:
    """`body` with the admission options applied (unchanged when neither is given)."""
    if mode is None and margin is None:
        return body
    sim = body.simulation or SimulationFile()
    update: dict[str, object] = {}
    if mode is not None:
        if mode not in {"off", "shed", "defer"}:
            raise SpecError(f"--admission: {mode!r} is not one of off, shed, defer")
        update["mode"] = mode
    if margin is not None:  # finite and >= 0: checked by the option's callback
        update["margin_fraction"] = margin
    admission = AdmissionFile.model_validate({**sim.admission.model_dump(), **update})
    return body.model_copy(update={"simulation": sim.model_copy(update={"admission": admission})})


def _render_sweep(rows: list[SweepRow], out: Output) -> None:
    table = Table(title="Time-scale sweep")
    for name in ("scale", "offered/s", "policy", "throughput/s", "goodput/s", "in SLO"):
        table.add_column(name, justify="right")
    table.add_column("TTFT mean / P90 / P99 (s)", justify="right")
    table.add_column("prefix hit", justify="right")
    for r in rows:
        table.add_row(
            f"{r.time_scale:g}",
            _fmt(r.offered_per_s, ".3f"),
            r.policy,
            _fmt(r.throughput_per_s, ".3f"),
            _fmt(r.goodput_per_s, ".3f"),
            "-" if r.num_in_slo is None else f"{r.num_in_slo} / {r.num_requests}",
            " / ".join(_fmt(v) for v in (r.ttft_mean_s, r.ttft_p90_s, r.ttft_p99_s)),
            f"{r.prefix_hit_fraction:.1%}",
        )
    out.table(table)
    for policy, (rate, scale) in saturation(rows).items():
        if saturated(rows, policy):
            out.note(
                f"{policy}: saturation {rate:.3f} req/s (largest completion rate, at {scale:g})"
            )
        else:
            out.note(
                f"{policy}: never saturated; {rate:.3f} req/s at the highest load tried "
                f"(time scale {scale:g})"
            )


def command(
    *,
    scenario: ScenarioOption = "paper-case-study",
    policy: PolicyOption = None,
    compare: CompareOption = None,
    trace: TraceOption = None,
    time_scale: TimeScaleOption = None,
    rebalance_period: RebalanceOption = None,
    as_json: JsonOption = False,
    plot_dir: PlotDirOption = None,
    time_scales: TimeScalesOption = None,
    admission: AdmissionOption = None,
    admission_margin: AdmissionMarginOption = None,
    slo_capacity: SloCapacityOption = False,
    load_factors: LoadFactorsOption = "0.5,0.75,1,1.25,1.5,2",
    capacity_tolerance: CapacityToleranceOption = 0.02,
    saturation_seeds: SaturationSeedsOption = None,
    output_format: FormatOption = None,
    timing: TimingOption = None,
    engine: EngineOption = None,
    search: SearchOption = False,
    one_pd_shape: OnePdShapeOption = False,
    engine_rules: EngineRulesOption = True,
) -> None:
    """Discrete-event simulation of a PrfaaS-PD deployment (or a baseline) with queueing,
    bursts, prefix hits and a fluctuating link."""
    if policy is not None and compare is not None:
        raise SpecError("give either --policy or --compare")
    is_capacity = slo_capacity or saturation_seeds is not None
    shapes = _shape_search(search, one_pd_shape, engine_rules, is_capacity)
    fmt = resolve_format(output_format, as_json)
    body, base_dir = read_scenario_file(scenario)
    body = with_timing(body, timing, engine)
    if trace is not None:
        body = with_trace(body, trace)
    body = _with_run_options(body, time_scale, rebalance_period)
    body = with_admission(body, admission, admission_margin)
    policies: list[str | None] = (
        [p.strip() for p in compare.split(",") if p.strip()] if compare else [policy]
    )
    if slo_capacity:
        from prfaas.cli import slo_capacity as capacity

        capacity.run(
            body,
            base_dir,
            Path(scenario).name,
            policies,
            capacity.SweepOptions(load_factors, capacity_tolerance, fmt, plot_dir),
        )
        return
    if saturation_seeds is not None:
        _saturation(body, base_dir, scenario, policies, saturation_seeds, fmt)
        return
    if time_scales is not None:
        _sweep(body, base_dir, scenario, policies, time_scales, fmt, plot_dir, shapes)
        return
    with progress_bar() as bar:
        task = bar.add_task("simulating", total=len(policies))
        runs = simulate_body(
            body,
            base_dir,
            Path(scenario).name,
            policies,
            lambda name, frac: bar.update(task, description=f"simulating {name}", advance=0.01),
            search=shapes,
        )
    if fmt is Format.JSON:
        typer.echo(json.dumps([r.report.to_json() for r in runs], indent=2))
    else:
        _render(runs, Output(fmt))
    if plot_dir is not None:
        from prfaas.sim.plots import write_plots

        for path in write_plots([r.report for r in runs], plot_dir):
            typer.echo(f"wrote {path}", err=fmt is not Format.TABLE)


def _with_run_options(
    body: ScenarioFile, time_scale: float | None, rebalance_period: float | None
) -> ScenarioFile:
    """The scenario with `--time-scale` on its trace arrivals and `--rebalance-period` on its
    slow loop."""
    if time_scale is not None:
        if body.arrivals is None:
            raise SpecError("--time-scale applies to a trace workload: give --trace too")
        body = body.model_copy(
            update={"arrivals": body.arrivals.model_copy(update={"time_scale": time_scale})}
        )
    if rebalance_period is not None:
        sim = body.simulation or SimulationFile()
        rebalance = (sim.rebalance or RebalanceFile()).model_copy(
            update={"period_s": rebalance_period}
        )
        body = body.model_copy(
            update={"simulation": sim.model_copy(update={"rebalance": rebalance})}
        )
    return body


def _shape_search(
    search: bool, one_pd_shape: bool, engine_rules: bool, is_capacity: bool
) -> ShapeSearch | None:
    """The parallelism search the options ask for (None: the scenario's own shapes)."""
    if search and is_capacity:
        raise SpecError(
            "--search-parallelism runs the searched plan once or over --time-scales; "
            "--slo-capacity and --saturation-seeds run the scenario's own shapes"
        )
    return shape_search(search, one_pd_shape=one_pd_shape, engine_rules=engine_rules)


def _sweep(  # noqa: PLR0917 (the command's options, passed on)
    body: ScenarioFile,
    base_dir: Path,
    scenario: str,
    policies: list[str | None],
    time_scales: str,
    fmt: Format,
    plot_dir: Path | None,
    shapes: ShapeSearch | None,
) -> None:
    scales = checks.time_scale_list("--time-scales", time_scales)
    with progress_bar() as bar:
        task = bar.add_task("simulating", total=len(policies) * len(scales))
        rows = sweep_time_scales(
            body,
            base_dir,
            Path(scenario).name,
            scales,
            policies,
            progress=lambda name, frac: bar.update(
                task, description=f"simulating {name}", advance=0.01
            ),
            search=shapes,
        )
    if fmt is Format.JSON:
        typer.echo(json.dumps(sweep_json(rows), indent=2))
    else:
        _render_sweep(rows, Output(fmt))
    if plot_dir is not None:
        from prfaas.sim.plots import write_sweep_plot

        typer.echo(f"wrote {write_sweep_plot(rows, plot_dir)}", err=fmt is not Format.TABLE)


def _saturation(  # noqa: PLR0917 (the command's options, passed on)
    body: ScenarioFile,
    base_dir: Path,
    scenario: str,
    policies: list[str | None],
    num_seeds: int,
    fmt: Format,
) -> None:
    """`--saturation-seeds N`: each policy's saturation as a value with its interval."""
    from prfaas.sim.saturation import LOAD_FACTORS, seeded_saturation

    sim = body.simulation or SimulationFile()
    names = [p or sim.policy for p in policies]
    with progress_bar() as bar:
        bar.add_task(f"{num_seeds} seeds x {len(LOAD_FACTORS)} loads per policy", total=None)
        estimates = {
            name: seeded_saturation(
                body,
                base_dir,
                Path(scenario).name,
                name,
                seeds=range(sim.seed, sim.seed + num_seeds),
            )
            for name in names
        }
    if fmt is Format.JSON:
        typer.echo(json.dumps({n: e.to_json() for n, e in estimates.items()}, indent=2))
        return
    out = Output(fmt)
    for name, e in estimates.items():
        out.note(
            f"{name}: saturation {e.value_per_s:.3f} req/s, 95% interval [{e.low_per_s:.3f}, "
            f"{e.high_per_s:.3f}] over {len(e.samples_per_s)} seeds (plan {e.planned_per_s:.3f})"
        )
