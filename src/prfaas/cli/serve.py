"""`prfaas instance`, `prfaas router`, `prfaas up`, `prfaas demo`: the live deployment.

`instance` imports the engine (torch) inside the command; `router`, `up` and `demo` never do.
Bad deployment files and start-up failures are one-line errors with exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from prfaas.serve.config import load_deployment
from prfaas.serve.errors import ServeError
from prfaas.transfer.errors import ConfigError

DeploymentArg = Annotated[
    Path | None,
    typer.Argument(help="Deployment YAML (docs/serving.md); the built-in default without one."),
]


def _fail(message: str) -> typer.Exit:
    print(f"prfaas: error: {message}", file=sys.stderr)
    return typer.Exit(2)


def instance(
    deployment: DeploymentArg = None,
    *,
    name: Annotated[str, typer.Option("--name", help="Which instance of the file to run.")],
) -> None:
    """Run one instance (engine, control API, transfer endpoint) of a deployment."""
    try:
        from prfaas.serve.instance import serve_instance
    except ImportError as err:
        raise _fail(f"the instance needs the 'engine' extra ({err})") from None
    try:
        serve_instance(load_deployment(deployment), name)
    except (ServeError, ConfigError) as err:
        raise _fail(str(err)) from None


def router(deployment: DeploymentArg = None) -> None:
    """Run the router (OpenAI-compatible API, scheduler, metrics) of a deployment."""
    from prfaas.serve.router import serve_router

    try:
        serve_router(load_deployment(deployment))
    except ServeError as err:
        raise _fail(str(err)) from None


def up(deployment: DeploymentArg = None) -> None:
    """Start the router and every instance on this host; Ctrl-C stops them all."""
    from prfaas.serve.launcher import Launcher, run_until_signal

    try:
        launcher = Launcher(load_deployment(deployment), quiet=False)
        launcher.start()
        try:
            launcher.wait_healthy()
        except BaseException:
            launcher.stop()
            raise
    except ServeError as err:
        raise _fail(str(err)) from None
    typer.echo(f"prfaas: serving {launcher.deployment.model_name} at {launcher.url}/v1")
    run_until_signal(launcher)


def demo(
    deployment: DeploymentArg = None,
    *,
    keep_serving: Annotated[
        bool, typer.Option("--serve", help="Keep the deployment up after the demo.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Serve this model instead (e.g. smollm2-135m: real weights)."),
    ] = None,
) -> None:
    """Bring up the deployment, send short and long prompts, print where each went and why."""
    from prfaas.serve.demo import run_demo

    try:
        loaded = load_deployment(deployment)
        if model is not None:
            loaded = loaded.model_copy(update={"model": model})
        run_demo(loaded, keep_serving=keep_serving)
    except ServeError as err:
        raise _fail(str(err)) from None
