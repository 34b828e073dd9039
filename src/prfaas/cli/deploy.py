"""`prfaas deploy render`: Kubernetes manifests for both clusters from one description
(`prfaas.deploy`, docs/deploy.md). A bad description or deployment file is one line per
problem, `prfaas: error: <field>: <problem>`, exit 2; nothing is written then.
`prfaas deploy pods`: the rendered pods as start scripts, for hosts that are not Kubernetes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from prfaas.deploy.pod_scripts import write_pod_scripts
from prfaas.deploy.render import MANIFESTS_FILE, render, write
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


@app.command("pods")
def pods_command(
    out: Annotated[Path, typer.Argument(help="The directory `prfaas deploy render` wrote.")],
    to: Annotated[
        Path, typer.Option("--to", help="Directory for the scripts, .env files, deployment.yaml.")
    ] = Path("out/pods"),
    python: Annotated[
        str, typer.Option("--python", help="Interpreter with prfaas installed (the image's).")
    ] = sys.executable,
) -> None:
    """Write a start script per rendered pod (its container's command and environment) for
    hosts or network namespaces outside Kubernetes; give each pod's DNS name its host's
    address (docs/deploy.md, "Two datacenters on one machine")."""
    if not any((d / MANIFESTS_FILE).is_file() for d in out.glob("*")):
        print(
            f"prfaas: error: {out}: no <cluster>/{MANIFESTS_FILE} (run prfaas deploy render)",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    for written in write_pod_scripts(out, to, python):
        path, port = written.pod.readiness
        typer.echo(f"{written.script}  ({written.pod.cluster}; ready: GET {path} on :{port})")
