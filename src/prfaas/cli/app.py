"""Entry point of the `prfaas` command: one typer app, one place that turns user errors into a
one-line message and a non-zero exit (no tracebacks for bad input)."""

from __future__ import annotations

import sys

import typer

from prfaas import __version__
from prfaas.cli import bench, generate, kv_throughput, plan, serve, simulate
from prfaas.specs.errors import SpecError

app = typer.Typer(
    name="prfaas",
    help="Prefill-as-a-Service: plan, simulate and serve cross-datacenter PD-disaggregated LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"prfaas {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Prefill-as-a-Service (arXiv 2604.15039)."""


app.command("kv-throughput")(kv_throughput.command)
app.command("plan")(plan.command)
app.command("generate")(generate.command)
app.command("simulate")(simulate.command)
app.command("instance")(serve.instance)
app.command("router")(serve.router)
app.command("up")(serve.up)
app.command("demo")(serve.demo)
app.command("bench")(bench.command)


def main() -> None:
    try:
        app()
    except SpecError as err:
        print(f"prfaas: error: {err}", file=sys.stderr)
        sys.exit(2)
