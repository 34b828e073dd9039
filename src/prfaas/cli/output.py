"""What the commands print: tables in four formats that survive redirection, and progress bars
that appear only on a terminal.

`--format table` (the default) draws rich tables; on a terminal they fit its width, and when
stdout is a file or a pipe they take the width they need (rich would otherwise cut every cell to
80 columns). `tsv` prints a header row and one tab-separated line per row, no title, for `cut`
and spreadsheets; `markdown` prints a GitHub table under a `###` title. Notes under a table
(reasons, sources) go to stdout, except with `tsv`, where they go to stderr so that stdout is
only the data. `json` (also `--json`) is each command's own JSON document.

Progress bars draw on stderr, and only when stderr is a terminal, so a redirected or piped run,
and every JSON document, stays clean.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from prfaas.planner.scenario import bundled_scenarios

#: Width for tables when stdout is not a terminal: wide enough that no cell is ever cut.
UNBOUNDED_WIDTH = 10_000


class Format(StrEnum):
    TABLE = "table"
    TSV = "tsv"
    MARKDOWN = "markdown"
    JSON = "json"


FormatOption = Annotated[
    Format | None,
    typer.Option(
        "--format",
        help="table (default), tsv, markdown or json (the same as --json).",
        case_sensitive=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON, not a table.")]
ScenarioOption = Annotated[
    str,
    typer.Option(
        "--scenario",
        "-s",
        help="Bundled scenario (listed below) or a scenario YAML file.",
    ),
]


def scenarios_epilog() -> str:
    """The bundled scenarios, one a line, for a command's help (click keeps `\b` blocks)."""
    return "\b\nBundled scenarios:\n" + "\n".join(f"  {n}" for n in bundled_scenarios())


def resolve_format(fmt: Format | None, as_json: bool) -> Format:
    """`--format` and `--json` together: they must agree."""
    if as_json and fmt not in (None, Format.JSON):
        raise typer.BadParameter(f"--json contradicts --format {fmt}", param_hint="--format")
    if as_json:
        return Format.JSON
    return fmt or Format.TABLE


def _cell(value: object) -> str:
    return str(value).replace("\t", " ").replace("\n", " ")


class Output:
    """Tables and notes in one format on stdout."""

    def __init__(self, fmt: Format) -> None:
        self.format = fmt
        self.console = Console(soft_wrap=True)
        if not self.console.is_terminal:
            self.console.width = UNBOUNDED_WIDTH

    def table(self, table: Table) -> None:
        if self.format is Format.TABLE or self.format is Format.JSON:
            self.console.print(table)
            return
        headers = [_cell(column.header) for column in table.columns]
        rows = list(zip(*([_cell(c) for c in col.cells] for col in table.columns), strict=True))
        if self.format is Format.TSV:
            for line in (headers, *rows):
                print("\t".join(line))
            return
        if table.title:
            print(f"### {table.title}\n")
        escape = [[cell.replace("|", "\\|") for cell in line] for line in (headers, *rows)]
        print("| " + " | ".join(escape[0]) + " |")
        print("|" + "|".join("---" for _ in headers) + "|")
        for line in escape[1:]:
            print("| " + " | ".join(line) + " |")
        print()

    def note(self, text: str) -> None:
        if self.format is Format.TSV:
            print(text, file=sys.stderr)
        elif self.format is Format.MARKDOWN:
            print(text + "\n")
        else:
            self.console.print(text, highlight=False, markup=False)


def progress_bar(*, counted: bool = False) -> Progress:
    """A transient bar on stderr, shown only when stderr is a terminal."""
    columns: list[ProgressColumn | str] = [TextColumn("[progress.description]{task.description}")]
    columns.append(BarColumn())
    if counted:
        columns.append(MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    err = Console(stderr=True)
    return Progress(*columns, console=err, transient=True, disable=not err.is_terminal)
