"""`prfaas deploy render`: Kubernetes manifests for both clusters from one description
(`prfaas.deploy`, docs/deploy.md). A bad description or deployment file is one line per
problem, `prfaas: error: <field>: <problem>`, exit 2; nothing is written then."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from prfaas.deploy.render import render, write
from prfaas.serve.errors import DeploymentError

app = typer.Typer(
    help="Kubernetes manifests for a deployment (docs/deploy.md).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@app.command("render")
def render_command(
    description: Annotated[
        Path, typer.Argument(help="The description YAML (its deployment file, the clusters).")
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for <cluster>/manifests.yaml and secret.yaml.")
    ] = Path("out/k8s"),
) -> None:
    """Write each cluster's manifests and its Secret (the secret.yaml files hold the transfer
    secret and the admin token: keep them out of version control)."""
    try:
        written = write(render(description), out)
    except DeploymentError as err:
        for line in err.problems:
            print(f"prfaas: error: {line}", file=sys.stderr)
        raise typer.Exit(2) from None
    for path in written:
        typer.echo(str(path))
