"""Entry point of the `prfaas` command: one typer app, one place that turns user errors into a
one-line message and a non-zero exit (no tracebacks for bad input).

Help is click's plain formatter (`rich_markup_mode=None`): it wraps to the terminal, shows no
`<bool>` type for flags, and reads the same in a pipe. Usage errors (an unknown option, a value
that does not parse or is out of range: `cli.checks`) and `SpecError`s both leave as one line
`prfaas: error: ...` on stderr with exit status 2.
"""

from __future__ import annotations

import sys

import typer
from typer._click.exceptions import (  # typer (pinned) vendors click
    ClickException,
    NoArgsIsHelpError,
)

from prfaas import __version__
from prfaas.cli import bench, deploy, generate, kv_throughput, plan, serve, simulate, tokenizer
from prfaas.cli.output import scenarios_epilog
from prfaas.specs.errors import SpecError

app = typer.Typer(
    name="prfaas",
    help="Prefill-as-a-Service: plan, simulate and serve cross-datacenter PD-disaggregated LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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


for name, short_help, function in (
    ("kv-throughput", "KV throughput (Gbps) of one prefill instance.", kv_throughput.command),
    ("plan", "Optimal threshold and P/D split, beside the baselines.", plan.command),
    ("generate", "Generate text with the reference engine (CPU).", generate.command),
    ("simulate", "Discrete-event simulation of a deployment.", simulate.command),
    ("instance", "Run one instance of a deployment.", serve.instance),
    ("router", "Run the router (OpenAI API) of a deployment.", serve.router),
    ("up", "Start a whole deployment on this host.", serve.up),
    ("demo", "Bring a deployment up, send prompts, show the paths.", serve.demo),
    ("bench", "Load-test any OpenAI-compatible endpoint.", bench.command),
    ("tokenizer", "Write the served model's tokenizer for clients.", tokenizer.command),
):
    epilog = scenarios_epilog() if name in ("plan", "simulate") else None
    app.command(name, short_help=short_help, epilog=epilog)(function)
app.add_typer(deploy.app, name="deploy", short_help="Kubernetes manifests for a deployment.")


def main(argv: list[str] | None = None) -> None:
    """Run the command line on `argv` (default: sys.argv) and exit with its status."""
    try:
        status = app(args=argv, prog_name="prfaas", standalone_mode=False)
    except SpecError as err:
        print(f"prfaas: error: {err}", file=sys.stderr)
        sys.exit(2)
    except NoArgsIsHelpError as err:  # `prfaas` alone: the help, as click prints it
        print(err.format_message())
        sys.exit(err.exit_code)
    except ClickException as err:
        print(f"prfaas: error: {err.format_message()}", file=sys.stderr)
        sys.exit(err.exit_code)
    except typer.Abort:
        print("prfaas: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(status if isinstance(status, int) else 0)
