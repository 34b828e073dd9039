"""`prfaas bench`: replay a trace or synthetic load against an OpenAI-compatible endpoint.

The shell around `prfaas.bench`: flags to arrivals and config, a rich progress bar while the
run goes, then a table (or `--json`, `--save`) of the `prfaas.metrics/1` summary. A run that
stops early (unreachable server, wrong endpoint, malformed trace line, Ctrl-C) prints the
partial report of what completed (nothing when no request did), then one line on stderr, and
exits 1; a flag error (`cli.checks`: every number finite and in range) exits 2.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from prfaas.bench import (
    Api,
    Arrival,
    BenchConfig,
    BenchError,
    BenchResult,
    TokenUnit,
    WorkloadSpecError,
    count_trace_requests,
    parse_workload_spec,
    run_bench,
    synthetic_arrivals,
    trace_arrivals,
)
from prfaas.cli import checks
from prfaas.cli.output import (
    Format,
    FormatOption,
    JsonOption,
    Output,
    progress_bar,
    resolve_format,
)
from prfaas.metrics import MetricsSummary, RequestRecord, Slo

DEFAULT_SYNTHETIC_REQUESTS = 100


def parse_goodput(spec: str) -> Slo:
    """`ttft:MS,tpot:MS` (either or both; commas or spaces) -> an Slo in seconds."""
    limits: dict[str, float] = {}
    for item in spec.replace(",", " ").split():
        name, _, raw = item.partition(":")
        if name not in ("ttft", "tpot") or not raw:
            raise WorkloadSpecError(f"--goodput: bad item {item!r} (use ttft:MS,tpot:MS)")
        try:
            limit_ms = float(raw)
        except ValueError:
            raise WorkloadSpecError(f"--goodput: {raw!r} is not milliseconds") from None
        if not math.isfinite(limit_ms) or limit_ms <= 0:
            raise WorkloadSpecError(f"--goodput: {raw!r} is not a finite number of ms > 0")
        limits[name] = limit_ms / 1000.0
    if not limits:
        raise WorkloadSpecError("--goodput: give ttft:MS and/or tpot:MS")
    return Slo(ttft_s=limits.get("ttft"), tpot_s=limits.get("tpot"))


def _arrivals(
    trace: Path | None,
    workload: str | None,
    *,
    time_scale: float | None,
    rate: float | None,
    burstiness: float | None,
    num_requests: int | None,
    seed: int,
) -> tuple[Iterable[Arrival], int, str]:
    """Arrivals, how many, and a description; flag combinations checked here."""
    if (trace is None) == (workload is None):
        raise WorkloadSpecError("give exactly one of --trace and --workload")
    if trace is not None:
        if rate is not None or burstiness is not None:
            raise WorkloadSpecError("--rate and --burstiness apply to --workload, not --trace")
        total = count_trace_requests(trace, num_requests)
        scale = 1.0 if time_scale is None else time_scale
        return trace_arrivals(trace, scale, num_requests), total, f"trace {trace} x{scale:g}"
    assert workload is not None
    if time_scale is not None:
        raise WorkloadSpecError("--time-scale applies to --trace; use --rate with --workload")
    spec = parse_workload_spec(workload)
    num = DEFAULT_SYNTHETIC_REQUESTS if num_requests is None else num_requests
    rate_per_s = math.inf if rate is None else rate
    shape = 1.0 if burstiness is None else burstiness
    arrivals = synthetic_arrivals(spec, num, rate_per_s, shape, seed)
    return arrivals, num, f"{workload} at {rate_per_s:g} req/s, burstiness {shape:g}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def _render(summary: MetricsSummary, result: BenchResult, source: str, out: Output) -> None:
    table = Table(title=f"prfaas bench: {result.model} at {result.endpoint}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    s = summary
    table.add_row("workload", source)
    table.add_row(
        "requests completed / failed / rejected (429)",
        f"{s.num_completed} / {s.num_failed} / {s.num_rejected}",
    )
    table.add_row("duration, first arrival -> last token (s)", f"{s.duration_s:.2f}")
    table.add_row("wall time (s)", f"{result.duration_s:.2f}")
    table.add_row("request throughput (req/s)", f"{s.request_throughput_per_s:.2f}")
    table.add_row(
        "input / output tokens per s",
        f"{s.input_token_throughput_per_s:.1f} / {s.output_token_throughput_per_s:.1f}",
    )
    if s.goodput_per_s is not None:
        table.add_row("goodput (req/s)", f"{s.goodput_per_s:.2f}")
    for name, dist in (("TTFT", s.ttft_s), ("TPOT", s.tpot_s), ("ITL", s.itl_s), ("E2E", s.e2e_s)):
        cells = " / ".join(_ms(v) for v in (dist.mean, dist.median, dist.p90, dist.p99))
        table.add_row(f"{name} mean / P50 / P90 / P99 (ms)", cells)
    if s.paths:
        table.add_row("paths", ", ".join(f"{k} {v}" for k, v in s.paths.items()))
    for reason, count in s.failures.items():
        table.add_row("failed: " + reason, str(count))
    for reason, count in s.rejections.items():
        table.add_row("rejected: " + reason, str(count))
    out.table(table)


def _run(config: BenchConfig, arrivals: Iterable[Arrival], total: int) -> BenchResult:
    """Run with a progress bar; Ctrl-C keeps what finished (requests in flight are dropped)."""
    done: list[RequestRecord] = []
    failed = [0]
    with progress_bar(counted=True) as bar:
        task = bar.add_task("benchmarking", total=total)

        def on_record(record: RequestRecord) -> None:
            done.append(record)
            failed[0] += not record.is_completed
            bar.update(task, advance=1, description=f"benchmarking ({failed[0]} failed)")

        try:
            return asyncio.run(run_bench(config, arrivals, on_record))
        except KeyboardInterrupt:
            ends = [r.last_token_s for r in done if r.last_token_s is not None]
            return BenchResult(
                config.endpoint, config.model, tuple(done), max(ends, default=0.0), "interrupted"
            )


# The command's flags, one alias each (as `cli.output.FormatOption`).
EndpointOption = Annotated[str, typer.Option("--endpoint", help="Server root or .../v1 URL.")]
TraceOption = Annotated[Path | None, typer.Option("--trace", help="Mooncake JSONL trace.")]
WorkloadOption = Annotated[
    str | None,
    typer.Option("--workload", help="Synthetic lengths, e.g. fixed:in=512,out=64 (docs/bench.md)."),
]
TimeScaleOption = Annotated[
    float | None,
    typer.Option(
        "--time-scale",
        help="Multiply trace gaps (0.5 = 2x rate), in (0, 1000].",
        callback=checks.time_scale,
    ),
]
RateOption = Annotated[
    float | None,
    typer.Option("--rate", help="Requests/s (default: all at once).", callback=checks.positive),
]
BurstinessOption = Annotated[
    float | None,
    typer.Option(
        "--burstiness", help="Gamma shape: 1 Poisson, <1 bursty.", callback=checks.positive
    ),
]
MaxConcurrencyOption = Annotated[
    int,
    typer.Option(
        "--max-concurrency", help="Requests in flight at most.", callback=checks.positive_int
    ),
]
GoodputOption = Annotated[
    str | None, typer.Option("--goodput", help="SLOs in ms, e.g. ttft:2000,tpot:50.")
]
NumRequestsOption = Annotated[
    int | None,
    typer.Option(
        "--num-requests", help="Synthetic count / trace prefix.", callback=checks.positive_int
    ),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", help="Model id (default: first in /v1/models).")
]
ApiOption = Annotated[Api, typer.Option("--api", help="completions (/v1/completions) or chat.")]
TokenUnitOption = Annotated[
    TokenUnit, typer.Option("--token-unit", help="byte (tiny presets) or word (BPE).")
]
SeedOption = Annotated[
    int,
    typer.Option("--seed", help="Lengths, gaps and prompt text.", callback=checks.non_negative_int),
]
TimeoutOption = Annotated[
    float,
    typer.Option("--timeout", help="Per-request limit (s).", callback=checks.positive),
]
DurationOption = Annotated[
    float | None,
    typer.Option(
        "--duration",
        help="End the run after S s; requests in flight are cut off.",
        callback=checks.positive,
    ),
]
SaveOption = Annotated[Path | None, typer.Option("--save", help="Also write the JSON here.")]
RecordsOption = Annotated[
    Path | None, typer.Option("--records", help="Write one JSON line per request here.")
]


def command(
    *,
    endpoint: EndpointOption,
    trace: TraceOption = None,
    workload: WorkloadOption = None,
    time_scale: TimeScaleOption = None,
    rate: RateOption = None,
    burstiness: BurstinessOption = None,
    max_concurrency: MaxConcurrencyOption = 256,
    goodput: GoodputOption = None,
    num_requests: NumRequestsOption = None,
    model: ModelOption = None,
    api: ApiOption = Api.COMPLETIONS,
    token_unit: TokenUnitOption = TokenUnit.BYTE,
    seed: SeedOption = 0,
    timeout_s: TimeoutOption = 600.0,
    duration: DurationOption = None,
    as_json: JsonOption = False,
    save: SaveOption = None,
    records: RecordsOption = None,
    output_format: FormatOption = None,
) -> None:
    """Replay a Mooncake trace or synthetic load against an OpenAI-compatible endpoint and
    report TTFT, TPOT, ITL, E2E, throughput and goodput (docs/bench.md)."""
    fmt = resolve_format(output_format, as_json)
    try:
        slo = None if goodput is None else parse_goodput(goodput)
        arrivals, total, source = _arrivals(
            trace,
            workload,
            time_scale=time_scale,
            rate=rate,
            burstiness=burstiness,
            num_requests=num_requests,
            seed=seed,
        )
        config = BenchConfig(
            endpoint,
            model,
            max_concurrency,
            timeout_s,
            token_unit,
            seed,
            duration_s=duration,
            api=api,
        )
        result = _run(config, arrivals, total)
    except BenchError as err:
        print(f"prfaas: error: {err}", file=sys.stderr)
        raise typer.Exit(2) from None
    if result.stopped is not None and not result.records:
        print(f"prfaas: error: {result.stopped} (no request completed)", file=sys.stderr)
        raise typer.Exit(1)
    report = result.to_json(slo, source)
    if fmt is Format.JSON:
        typer.echo(json.dumps(report, indent=2))
    else:
        _render(result.summary(slo), result, source, Output(fmt))
    if save is not None:
        save.write_text(json.dumps(report, indent=2) + "\n")
    if records is not None:
        records.write_text(result.records_jsonl())
    if result.stopped is not None:
        print(f"prfaas: error: {result.stopped} (partial report above)", file=sys.stderr)
        raise typer.Exit(1)
