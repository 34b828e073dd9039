"""`prfaas kv-throughput`: Phi_kv = S_kv / T_prefill (paper Eq. 1) per model and length."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from prfaas.cli.output import Format, FormatOption, JsonOption, Output, resolve_format
from prfaas.specs.catalog import get_chip, model_names, resolve_model
from prfaas.specs.errors import SpecError
from prfaas.specs.throughput import KvThroughputRow, PaperAgreement, kv_throughput_rows
from prfaas.specs.units import format_tokens, parse_tokens

MIB = 2**20


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _parse_lengths(text: str) -> list[int]:
    try:
        return [parse_tokens(part) for part in _split([text])]
    except ValueError as err:
        raise SpecError(f"--lengths: {err}") from None


def _render(rows: list[KvThroughputRow], out: Output) -> None:
    table = Table(title="KV throughput per prefill instance (Eq. 1)")
    for column in ("model", "length", "S_kv MiB", "T_prefill s", "Phi Gbps", "paper", "ratio"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in rows:
        ratio = row.ratio_to_paper
        table.add_row(
            row.model,
            format_tokens(row.length),
            f"{row.kv_bytes / MIB:,.1f}",
            f"{row.prefill_s:.3f}",
            f"{row.phi_gbps:.2f}",
            "-" if row.paper_phi_gbps is None else f"{row.paper_phi_gbps:.2f}",
            "-" if ratio is None else f"{ratio:.2f}x",
        )
    out.table(table)
    sources = sorted({f"{r.model}: {r.source}" for r in rows})
    out.note("timing: " + "; ".join(sources))
    for agreement in PaperAgreement.per_table(rows):
        out.note(
            f"vs paper {agreement.table}: {agreement.num_cells} cells, median ratio "
            f"{agreement.median_ratio:.2f}x, worst {agreement.worst_ratio:.2f}x"
        )


ModelOption = Annotated[
    list[str],
    typer.Option(
        "--model",
        "-m",
        help="Catalog name, model YAML or HF config.json; repeat or comma-separate. "
        "Default: every catalog model.",
    ),
]
ChipOption = Annotated[str, typer.Option("--chip", help="Chip of the prefill instance.")]
GpusOption = Annotated[int, typer.Option("--gpus", min=1, help="GPUs per prefill instance.")]
LengthsOption = Annotated[str, typer.Option("--lengths", help="Input lengths, e.g. 1K,8K.")]


def command(
    *,
    model: ModelOption = [],  # noqa: B006 - typer reads, never mutates, the default
    chip: ChipOption = "h200",
    gpus: GpusOption = 8,
    lengths: LengthsOption = "1K,8K,32K,128K",
    as_json: JsonOption = False,
    output_format: FormatOption = None,
) -> None:
    """KV throughput (Gbps) that one prefill instance emits, beside the paper's measurements."""
    fmt = resolve_format(output_format, as_json)
    models = [resolve_model(ref) for ref in (_split(model) or model_names())]
    rows = kv_throughput_rows(models, get_chip(chip), gpus, _parse_lengths(lengths))
    if fmt is Format.JSON:
        payload = [asdict(r) | {"ratio_to_paper": r.ratio_to_paper} for r in rows]
        typer.echo(json.dumps(payload, indent=2))
    else:
        _render(rows, Output(fmt))
