"""`prfaas plan`: the throughput-optimal PrfaaS-PD configuration of a scenario beside the
paper's baselines (Table 6), as a table or JSON, with the two panels of Fig. 5 as PNGs."""

from __future__ import annotations

import json
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from prfaas.cli import plan_pool
from prfaas.cli.output import (
    Format,
    FormatOption,
    JsonOption,
    Output,
    ScenarioOption,
    progress_bar,
    resolve_format,
)
from prfaas.cli.plan_deploy import write_deployment
from prfaas.planner.margins import aic_margins
from prfaas.planner.model import Hardware
from prfaas.planner.optimise import OperatingPoint
from prfaas.planner.parallel import ShapeSearch
from prfaas.planner.plan import PlanReport
from prfaas.planner.scenario import (
    Scenario,
    ScenarioFile,
    TimingFile,
    TraceFile,
    WorkloadFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.scheduler.trace_plan import ScenarioPlan, plan_scenario
from prfaas.specs.errors import SpecError
from prfaas.specs.timing import AicEngine, TimingSource

COLUMNS = {
    "prfaas_pd": "PrfaaS-PD",
    "homogeneous_pd": "homogeneous PD",
    "naive_heterogeneous": "naive heterogeneous",
    "equal_cost_homogeneous": "equal-cost homogeneous",
}


def _parse_cache_blocks(text: str) -> int | None:
    if text == "unbounded":
        return None
    if not text.isdigit():
        raise SpecError(f"--cache-blocks: {text!r} is not a block count or 'unbounded'")
    return int(text)


def _with_trace(body: ScenarioFile, trace: Path | None, cache_blocks: str | None) -> ScenarioFile:
    """Replace the scenario's workload by a trace, or change its trace's cache capacity."""
    current = body.workload.trace
    if trace is not None:
        path = str(trace.resolve())
    elif current is not None:
        path = current.path
    else:
        raise SpecError("--cache-blocks applies to a trace workload: give --trace too")
    if cache_blocks is not None:
        capacity = _parse_cache_blocks(cache_blocks)
    else:
        capacity = current.cache_capacity_blocks if current is not None else None
    workload = WorkloadFile(trace=TraceFile(path=path, cache_capacity_blocks=capacity))
    return body.model_copy(update={"workload": workload})


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(top: float, bottom: float) -> str:
    """top / bottom as `1.52x`; `-` where the bottom deployment serves nothing (a baseline
    that misses the TTFT objective)."""
    return "-" if bottom <= 0 else f"{top / bottom:.2f}x"


def _rows(point: OperatingPoint, report: PlanReport) -> list[str]:
    base = report.deployments["homogeneous_pd"].lambda_max
    best = report.deployments["prfaas_pd"].lambda_max
    counts = [str(n) if n else "-" for n in (point.n_prfaas, point.n_p, point.n_d)]
    return [
        "-" if point.threshold_tokens is None else f"{point.threshold_tokens / 1000:.1f}K",
        " / ".join(counts),
        f"{point.ttft_mean_s:.2f} / {point.ttft_p90_s:.2f}",
        " / ".join(
            _fmt(v, ".2f") for v in (point.theta_prfaas, point.theta_pd_p, point.theta_pd_d)
        ),
        f"{point.lambda_max:.2f} ({point.bottleneck})",
        _ratio(point.lambda_max, base),
        _ratio(best, point.lambda_max),
        f"{point.offload_fraction:.1%}",
        f"{point.egress_gbps:.1f}",
        f"{point.num_gpus} / {point.price:g}",
    ]


def _render(scenario: Scenario, chosen: ScenarioPlan, out: Output) -> None:
    report = chosen.report
    table = Table(title=f"Plan: {scenario.name} (paper Table 6 layout)")
    table.add_column("")
    for label in COLUMNS.values():
        table.add_column(label, justify="right")
    labels = [
        "trace mode",
        "threshold t",
        "N_prfaas / N_p / N_d",
        "mean / P90 TTFT (s)",
        "Theta prfaas / pdp / pdd (req/s)",
        "Lambda_max (req/s)",
        "vs homogeneous",
        "PrfaaS-PD speedup",
        "offloaded",
        "PrfaaS egress (Gbps)",
        "GPUs / price",
    ]
    cells = [[chosen.modes[name], *_rows(report.deployments[name], report)] for name in COLUMNS]
    for i, label in enumerate(labels):
        table.add_row(label, *(column[i] for column in cells))
    out.table(table)
    hw, w, best = scenario.hardware, report.workload, report.deployments["prfaas_pd"]
    out.note(
        f"workload: {w.description}; mean uncached input {w.uncached_input.mean_tokens:,.0f} "
        f"tokens, prefix hits {w.prefix_hit_fraction:.1%}, mean output "
        f"{w.mean_output_tokens:,.0f}; at t*: l_long {_fmt(best.long_mean_tokens, ',.0f')}, "
        f"l_short {_fmt(best.short_mean_tokens, ',.0f')}"
    )
    d = report.decode
    memory = "weights do not fit" if d.memory_batch_size is None else str(d.memory_batch_size)
    out.note(
        f"decode: BS_max {d.max_batch_size} at T_decode {d.step_s * 1e3:.1f} ms (latency bound "
        f"{d.latency_batch_size} at {hw.decode_slo_tokens_per_s:g} tokens/s SLO, memory bound "
        f"{memory}; docs/planner.md, memory model)"
    )
    for warning in report.warnings:
        out.note(f"warning: {warning}")
    for line in _cluster_lines(hw):
        out.note(line)
    for note in scenario.timing_notes:
        out.note(note)


#: What a plan with a shape per PD role gives up (docs/planner.md, "Parallelism search").
PD_SHAPES_NOTE = (
    "PD-P and PD-D have different shapes: their instances cannot flip roles, so the slow "
    "loop cannot rebalance this plan (--deployment-out turns its flips off; --one-pd-shape "
    "keeps one shape)"
)


def _cluster_lines(hw: Hardware) -> list[str]:
    """Each cluster's instances and timing source; a PD cluster whose roles take their own
    shapes is one line per role, then what that gives up."""
    prfaas, pd, decode = hw.prfaas.profile, hw.pd.profile, hw.decode_cluster.profile
    lines = [
        f"PrfaaS: {hw.prfaas.num_instances} x {prfaas.chip.name} x{prfaas.gpus_per_instance}, "
        f"timing {prfaas.source}"
    ]
    if hw.pd_decode is None:
        return [
            *lines,
            f"PD: {hw.pd.num_instances} x {pd.chip.name} x{pd.gpus_per_instance}, "
            f"timing {pd.source}",
        ]
    return [
        *lines,
        f"PD: {hw.pd.num_gpus} x {pd.chip.name}; PD-P instances x{pd.gpus_per_instance}, "
        f"timing {pd.source}; PD-D instances x{decode.gpus_per_instance}, timing {decode.source}",
        PD_SHAPES_NOTE,
    ]


def timing_json(scenario: Scenario) -> dict[str, object]:
    """What timed the plan: the chosen source, each cluster's profile and any fallback line."""
    hw = scenario.hardware
    return {
        "source": str(scenario.timing.source),
        "engine": str(scenario.timing.engine),
        "prfaas": hw.prfaas.profile.source,
        "pd": hw.pd.profile.source,
        "prfaas_gpus_per_instance": hw.prfaas.profile.gpus_per_instance,
        "pd_gpus_per_instance": hw.pd.profile.gpus_per_instance,
        "pd_decode": hw.decode_cluster.profile.source,
        "pd_decode_gpus_per_instance": hw.decode_cluster.profile.gpus_per_instance,
        "pd_roles_share_shape": hw.pd_decode is None,
        "notes": list(scenario.timing_notes) + ([] if hw.pd_decode is None else [PD_SHAPES_NOTE]),
    }


def _write_plots(report: PlanReport, plot_dir: Path) -> list[Path]:
    from prfaas.planner.plots import fig5a, fig5b

    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in (("fig5a-lambda-vs-np.png", fig5a), ("fig5b-bounds-vs-t.png", fig5b)):
        path = plot_dir / name
        figure(report).savefig(path, dpi=150)
        written.append(path)
    return written


PlotDirOption = Annotated[
    Path | None, typer.Option("--plot-dir", help="Write Fig. 5a and 5b as PNGs into DIR.")
]
TraceOption = Annotated[
    Path | None,
    typer.Option("--trace", help="Use a Mooncake-format trace as the workload instead."),
]
CacheOption = Annotated[
    str | None,
    typer.Option(
        "--cache-blocks",
        help="Prefix-cache capacity for the trace, in 512-token blocks, or 'unbounded' "
        "(default: the scenario's, else unbounded); 0 disables the cache.",
    ),
]


TimingOption = Annotated[
    TimingSource | None,
    typer.Option(
        "--timing",
        help="Timing source for every instance (default: the scenario's, else roofline).",
    ),
]
EngineOption = Annotated[
    AicEngine | None,
    typer.Option("--engine", help="aiconfigurator's engine data (with --timing aic)."),
]
SearchOption = Annotated[
    bool,
    typer.Option(
        "--search-parallelism",
        help="Search each cluster's GPUs per instance and TP/EP/DP split (planner.parallel).",
    ),
]
OnePdShapeOption = Annotated[
    bool,
    typer.Option(
        "--one-pd-shape",
        help="With --search-parallelism: one shape for PD-P and PD-D, so the slow loop can "
        "flip PD instances between the roles (default: each role its own shape if better).",
    ),
]
EngineRulesOption = Annotated[
    bool,
    typer.Option(
        "--engine-rules/--no-engine-rules",
        help="With --search-parallelism under --timing aic: keep to shape pairs the engine can "
        "serve disaggregated (SGLang: one attention TP for prefill and decode; default).",
    ),
]


class MarginsChoice(StrEnum):
    """Fixed planning margins (`planner.margins`): none (the paper's model) or
    aiconfigurator's four factors, read from its installed package."""

    NONE = "none"
    AIC = "aic"


MarginsOption = Annotated[
    MarginsChoice,
    typer.Option(
        "--margins",
        help="Plan with fixed margins: 'aic' applies aiconfigurator's latency corrections and "
        "rate-matching factors (read from its installed package); default none.",
    ),
]
DeploymentOutOption = Annotated[
    Path | None,
    typer.Option("--deployment-out", help="Write the PrfaaS-PD plan as a `prfaas up` file."),
]


def with_timing(
    body: ScenarioFile, timing: TimingSource | None, engine: AicEngine | None
) -> ScenarioFile:
    """`body` timed by the `--timing` / `--engine` options (`prfaas plan` and `prfaas simulate`
    alike, so both time a scenario the same way)."""
    if engine is not None and (timing or body.timing.source) is not TimingSource.AIC:
        raise SpecError("--engine picks aiconfigurator's data: add --timing aic")
    chosen = TimingFile(source=timing or body.timing.source, engine=engine or body.timing.engine)
    return body.model_copy(update={"timing": chosen})


def _with_margins(scenario: Scenario, margins: MarginsChoice) -> Scenario:
    """The scenario with the chosen margins on its hardware, and the line that says which
    (or why none: the aiconfigurator package is not installed)."""
    if margins is MarginsChoice.NONE:
        return scenario
    found = aic_margins()
    if isinstance(found, str):
        line = f"margins: aic asked for, but {found}; planned without margins"
        return replace(scenario, timing_notes=(*scenario.timing_notes, line))
    return replace(
        scenario,
        hardware=replace(scenario.hardware, margins=found),
        timing_notes=(*scenario.timing_notes, found.describe()),
    )


def shape_search(search: bool, *, one_pd_shape: bool, engine_rules: bool) -> ShapeSearch | None:
    """The parallelism search the options ask for (None: the scenario's own shapes); the
    options that shape the search need it (`prfaas plan` and `prfaas simulate` alike)."""
    if search:
        return ShapeSearch(per_role_pd=not one_pd_shape, engine_rules=engine_rules)
    if one_pd_shape:
        raise SpecError("--one-pd-shape restricts the parallelism search: add --search-parallelism")
    if not engine_rules:
        raise SpecError("--no-engine-rules widens the parallelism search: add --search-parallelism")
    return None


def command(
    *,
    scenario: ScenarioOption = "paper-case-study",
    as_json: JsonOption = False,
    plot_dir: PlotDirOption = None,
    trace: TraceOption = None,
    cache_blocks: CacheOption = None,
    pool_aware: Annotated[
        bool,
        typer.Option(
            "--pool-aware/--no-pool-aware",
            help="Trace workloads: plan on the hits the deployment's per-instance pools would "
            "see (default), or on one pooled LRU cache of --cache-blocks (--no-pool-aware).",
        ),
    ] = True,
    output_format: FormatOption = None,
    timing: TimingOption = None,
    engine: EngineOption = None,
    search: SearchOption = False,
    one_pd_shape: OnePdShapeOption = False,
    engine_rules: EngineRulesOption = True,
    margins: MarginsOption = MarginsChoice.NONE,
    deployment_out: DeploymentOutOption = None,
) -> None:
    """Optimal threshold and P/D split (paper Eq. 2-8) beside homogeneous, naive and
    equal-cost baselines."""
    fmt = resolve_format(output_format, as_json)
    shapes = shape_search(search, one_pd_shape=one_pd_shape, engine_rules=engine_rules)
    if cache_blocks is not None and pool_aware:
        raise SpecError("--cache-blocks sizes the ideal replay: add --no-pool-aware")
    body, base_dir = read_scenario_file(scenario)
    if trace is not None or cache_blocks is not None:
        body = _with_trace(body, trace, cache_blocks)
    body = with_timing(body, timing, engine)
    with progress_bar() as bar:
        task = bar.add_task("reading the workload", total=None)
        resolved = _with_margins(build_scenario(body, base_dir, Path(scenario).name), margins)
        if shapes is not None:
            bar.update(task, description="searching instance shapes")
            resolved = shapes.apply(resolved)
        bar.update(task, description="searching t and the P/D split (per-instance pools)")
        chosen = plan_scenario(resolved, body, base_dir, pool_aware=pool_aware)
    if fmt is Format.JSON:
        out = chosen.report.to_json()
        for name, mode in chosen.modes.items():
            out[name]["trace_mode"] = str(mode)
        out["timing"] = timing_json(resolved)
        if chosen.pool_points:
            out["pool_aware"] = plan_pool.points_json(list(chosen.pool_points))
        typer.echo(json.dumps(out, indent=2))
    else:
        output = Output(fmt)
        _render(resolved, chosen, output)
        if chosen.pool_points:
            plan_pool.render(list(chosen.pool_points), output)
    if plot_dir is not None:
        for path in _write_plots(chosen.report, plot_dir):
            typer.echo(f"wrote {path}", err=fmt is not Format.TABLE)
    if deployment_out is not None:
        write_deployment(chosen.report, resolved.hardware, body.chips, deployment_out)
        typer.echo(f"wrote {deployment_out}", err=fmt is not Format.TABLE)
