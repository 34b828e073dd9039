"""`prfaas instance`, `prfaas router`, `prfaas up`, `prfaas demo`: the live deployment.

`instance` imports the engine (torch) inside the command; `router`, `up` and `demo` never do.
Bad deployment files and start-up failures are one-line errors with exit code 2.
"""

from __future__ import annotations

import signal
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


QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No access-log line per request.")]


def router(deployment: DeploymentArg = None, *, quiet: QuietOption = False) -> None:
    """Run the router (OpenAI-compatible API, scheduler, metrics) of a deployment; one
    access-log line per request on stdout, a summary on stderr when it stops."""
    from prfaas.serve.access_log import install
    from prfaas.serve.router import serve_router

    log = install(quiet=quiet)
    # uvicorn shuts down on SIGINT/SIGTERM, then re-raises the signal: this handler turns it
    # (or one that comes before uvicorn listens) into _Stopped, so the summary still prints
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _stopped)
    try:
        serve_router(load_deployment(deployment))
    except ServeError as err:
        raise _fail(str(err)) from None
    except _Stopped:
        pass
    print(log.summary(), file=sys.stderr, flush=True)


class _Stopped(Exception):
    """The router was told to stop (SIGINT or SIGTERM)."""


def _stopped(signum: int, _: object) -> None:
    raise _Stopped(signum)


def up(deployment: DeploymentArg = None, *, quiet: QuietOption = False) -> None:
    """Start the router and every instance on this host; Ctrl-C stops them all. Prints a line
    per instance as it comes up, an access-log line per request (not with --quiet), and the
    router's summary when it stops."""
    from prfaas.serve.launcher import Launcher, run_until_signal
    from prfaas.serve.startup import wait_with_progress

    try:
        launcher = Launcher(load_deployment(deployment), quiet=quiet)
        launcher.start()
        try:
            wait_with_progress(launcher)
        except BaseException:
            launcher.stop()
            raise
    except ServeError as err:
        raise _fail(str(err)) from None
    typer.echo(f"prfaas: serving {launcher.deployment.model_name} at {launcher.url}/v1")
    typer.echo(f"prfaas: dashboard at {launcher.url}/dashboard (Ctrl-C stops everything)")
    run_until_signal(launcher)
    print("prfaas: every process stopped", file=sys.stderr)


def demo(
    deployment: DeploymentArg = None,
    *,
    keep_serving: Annotated[
        bool, typer.Option("--serve", help="Keep the deployment up after the demo.")
    ] = False,
) -> None:
    """Bring up the deployment, send short and long prompts, print where each went and why."""
    from prfaas.serve.demo import run_demo

    try:
        run_demo(load_deployment(deployment), keep_serving=keep_serving)
    except ServeError as err:
        raise _fail(str(err)) from None
