"""`prfaas instance`, `prfaas router`, `prfaas up`, `prfaas demo`: the live deployment.

`instance` imports the engine (torch) inside the command; `router`, `up` and `demo` never do.
Every command checks the deployment before it starts anything (`serve.launch.preflight`): every
problem found is one line `prfaas: error: <field>: <problem>`, exit code 2. `prfaas up` then
supervises its children (`serve.launch.supervisor`): exit 0 after Ctrl-C or SIGTERM, 3 when a child
kept exiting beyond the restart budget.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from prfaas.serve.config.deployment import Backend, Deployment, load_deployment, validation_problems
from prfaas.serve.errors import DeploymentError, ServeError
from prfaas.serve.launch.preflight import Scope, require_valid
from prfaas.transfer.errors import ConfigError

if TYPE_CHECKING:
    from prfaas.serve.launch.launcher import Launcher

DeploymentArg = Annotated[
    Path | None,
    typer.Argument(help="Deployment YAML (docs/serving.md); the built-in default without one."),
]


def _fail(err: Exception) -> typer.Exit:
    lines = err.problems if isinstance(err, DeploymentError) else (str(err),)
    for line in lines:
        print(f"prfaas: error: {line}", file=sys.stderr)
    return typer.Exit(2)


def instance(
    deployment: DeploymentArg = None,
    *,
    name: Annotated[str, typer.Option("--name", help="Which instance of the file to run.")],
) -> None:
    """Run one instance (engine, control API, transfer endpoint) of a deployment."""
    try:
        loaded = load_deployment(deployment)
        require_valid(loaded, Scope.INSTANCE, instance_name=name)
    except ServeError as err:
        raise _fail(err) from None
    try:
        from prfaas.serve.instance.app import serve_instance
    except ImportError as err:
        raise _fail(ImportError(f"the instance needs the 'engine' extra ({err})")) from None
    try:
        serve_instance(loaded, name)
    except (ServeError, ConfigError) as err:
        raise _fail(err) from None


QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No access-log line per request.")]


def router(deployment: DeploymentArg = None, *, quiet: QuietOption = False) -> None:
    """Run the router (OpenAI-compatible API, scheduler, metrics) of a deployment; one
    access-log line per request on stdout, a summary on stderr when it stops."""
    from prfaas.serve.router.access_log import install
    from prfaas.serve.router.app import serve_router

    log = install(quiet=quiet)
    # uvicorn shuts down on SIGINT/SIGTERM, then re-raises the signal: this handler turns it
    # (or one that comes before uvicorn listens) into _Stopped, so the summary still prints
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, _stopped)
    try:
        loaded = load_deployment(deployment)
        require_valid(loaded, Scope.ROUTER)
        serve_router(loaded)
    except ServeError as err:
        raise _fail(err) from None
    except _Stopped:
        pass
    print(log.summary(), file=sys.stderr, flush=True)


class _Stopped(Exception):
    """The router was told to stop (SIGINT or SIGTERM)."""


def _stopped(signum: int, _: object) -> None:
    raise _Stopped(signum)


def _overridden(
    deployment: Deployment,
    host: str | None,
    port: int | None,
    model: str | None,
    backend: Backend | None = None,
) -> Deployment:
    """The deployment with the command line's router address, model and backend, checked
    again as a whole (a vllm backend needs a model directory)."""
    raw = deployment.model_dump(mode="json")
    raw["router"].update({k: v for k, v in (("host", host), ("port", port)) if v is not None})
    if model is not None:
        raw["model"] = model
    if backend is not None:
        for instance in raw["instances"]:
            instance["backend"] = backend.value
    try:
        return Deployment.model_validate(raw)
    except ValidationError as err:
        raise DeploymentError(*validation_problems("command line", err)) from None


def up(
    deployment: DeploymentArg = None,
    *,
    host: Annotated[
        str | None, typer.Option("--host", help="The router's address (default 127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", min=0, max=65535, help="The router's port (default 8000)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model: an engine preset or a checkpoint directory."),
    ] = None,
    backend: Annotated[
        Backend | None,
        typer.Option(
            "--backend",
            help="Every instance's engine: torch, emulated or vllm (a model directory in "
            "vLLM's venv, `make setup-vllm`).",
        ),
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Start the router and every instance on this host, restart any that exits; Ctrl-C stops
    them all (exit 0; 3 when a child exhausted the restart budget, 2 for a bad deployment).
    Prints a line per instance as it comes up, an access-log line per request (not with
    --quiet), and the router's summary when it stops."""
    from prfaas.serve.launch.launcher import Launcher
    from prfaas.serve.launch.startup import wait_with_progress
    from prfaas.serve.launch.stopping import stop_on_signals
    from prfaas.serve.launch.supervisor import EXIT_STOPPED, Supervisor

    # SIGTERM stops as Ctrl-C does at every stage: until the supervisor takes both signals
    # over, both raise StopRequested (a KeyboardInterrupt), which stops what was started
    # (children, the link's namespaces); the supervisor then stops everything itself
    stop_on_signals()
    try:
        loaded = _overridden(load_deployment(deployment), host, port, model, backend)
        require_valid(loaded, Scope.ALL, secret_generated=True)
        launcher = Launcher(loaded, quiet=quiet)
        try:
            launcher.start()
            if launcher.engine_log_dir is not None:
                print(f"prfaas: engine output in {launcher.engine_log_dir}/<instance>.log")
            wait_with_progress(launcher, launcher.start_timeout_s)
            _announce(launcher)
            code = Supervisor(launcher).run()
        except BaseException:
            launcher.stop()
            raise
    except ServeError as err:
        raise _fail(err) from None
    except KeyboardInterrupt:
        print("prfaas: stopped before serving; every process stopped", file=sys.stderr)
        raise typer.Exit(EXIT_STOPPED) from None
    print("prfaas: every process stopped", file=sys.stderr)
    raise typer.Exit(code)


def _announce(launcher: Launcher) -> None:
    """The serving lines (stdout): where the API and the dashboard are."""
    typer.echo(f"prfaas: serving {launcher.deployment.model_name} at {launcher.url}/v1")
    if launcher.admin_token_generated:
        typer.echo(f"prfaas: admin token (Authorization: Bearer): {launcher.admin_token}")
    typer.echo(f"prfaas: dashboard at {launcher.url}/dashboard (Ctrl-C stops everything)")


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
    from prfaas.serve.launch.demo import run_demo

    try:
        loaded = load_deployment(deployment)
        loaded = _overridden(loaded, None, None if keep_serving else 0, model)
        require_valid(loaded, Scope.ALL, secret_generated=True)
        code = run_demo(loaded, keep_serving=keep_serving)
    except ServeError as err:
        raise _fail(err) from None
    raise typer.Exit(code)
