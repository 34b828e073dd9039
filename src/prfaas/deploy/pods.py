"""The processes a rendered deployment runs, read back from `prfaas deploy render`'s output
as a kubelet would start them, for running them outside Kubernetes (the test bed,
`deploy.testbed`, and its benchmark).

    pod_processes(out, file_path)   every pod of every cluster: its name, cluster, command
                                    line (`$(VAR)` expanded from its environment, the
                                    mounted deployment file mapped to `file_path`), its
                                    environment (the container's: values, the Secret's keys,
                                    the pod's own name) and its readiness probe
    pod_file(out)                   the deployment file the pods read (the ConfigMap's)

A Deployment's replicas are `<name>-<i>` here (Kubernetes adds a random suffix), a
StatefulSet's pods `<name>-<i>` as in a cluster. `python` in a command is the given
interpreter (the image's is this venv's here); what the image adds to the environment
(PATH, ...) is the caller's `base_env`, without any `PRFAAS_` variable, so only the pod's
own reach the process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from prfaas.deploy.layout import CONFIG_DIR, DEPLOYMENT_KEY
from prfaas.deploy.render import MANIFESTS_FILE, SECRET_FILE
from prfaas.deploy.workloads import DEPLOYMENT_CONFIGMAP, Manifest


@dataclass(frozen=True, slots=True)
class PodProcess:
    pod: str
    cluster: str
    container: str  # "router" or "instance"
    argv: tuple[str, ...]
    env: dict[str, str]
    readiness: tuple[str, int]  # the readiness probe's (HTTP path, port)


def _objects(out: Path, cluster: str) -> list[Manifest]:
    text = (out / cluster / MANIFESTS_FILE).read_text()
    return [m for m in yaml.safe_load_all(text) if m is not None]


def _clusters(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if (p / MANIFESTS_FILE).is_file())


def pod_file(out: Path) -> dict[str, Any]:
    """The deployment file the pods read (identical in every cluster's ConfigMap)."""
    for cluster in _clusters(out):
        for manifest in _objects(out, cluster):
            if manifest["kind"] == "ConfigMap" and (
                manifest["metadata"]["name"] == DEPLOYMENT_CONFIGMAP
            ):
                loaded: dict[str, Any] = yaml.safe_load(manifest["data"][DEPLOYMENT_KEY])
                return loaded
    raise FileNotFoundError(f"no {DEPLOYMENT_CONFIGMAP} ConfigMap under {out}")


def pod_processes(
    out: Path, file_path: Path, python: str, base_env: Mapping[str, str]
) -> list[PodProcess]:
    """Every pod of every cluster rendered under `out` (module docstring)."""
    found: list[PodProcess] = []
    for cluster in _clusters(out):
        secret = yaml.safe_load((out / cluster / SECRET_FILE).read_text())["stringData"]
        for workload in _objects(out, cluster):
            if workload["kind"] not in ("Deployment", "StatefulSet"):
                continue
            [container] = workload["spec"]["template"]["spec"]["containers"]
            name = workload["metadata"]["name"]
            for i in range(workload["spec"]["replicas"]):
                pod = f"{name}-{i}"
                env = _environment(container, pod, secret, base_env)
                argv = _argv(container, env, file_path, python)
                probe = _readiness(container)
                found.append(PodProcess(pod, cluster, container["name"], argv, env, probe))
    return found


def _environment(
    container: Manifest, pod: str, secret: Mapping[str, str], base_env: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, over `base_env`."""
    env = {k: v for k, v in base_env.items() if not k.startswith("PRFAAS_")}
    for variable in container["env"]:
        source = variable.get("valueFrom", {})
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif "secretKeyRef" in source:
            env[variable["name"]] = secret[source["secretKeyRef"]["key"]]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[variable["name"]] = pod
        else:
            raise ValueError(f"an environment variable this reader does not know: {variable}")
    return env


def _argv(
    container: Manifest, env: Mapping[str, str], file_path: Path, python: str
) -> tuple[str, ...]:
    """The command with `$(VAR)` expanded (as the kubelet does), the mounted file mapped."""
    program, *rest = container["command"]
    if program != "python":
        raise ValueError(f"a command this reader does not know: {container['command']}")
    argv = [python]
    for arg in rest:
        expanded = str(file_path) if arg.startswith(CONFIG_DIR + "/") else arg
        for name, value in env.items():
            expanded = expanded.replace(f"$({name})", value)
        argv.append(expanded)
    return tuple(argv)


def _readiness(container: Manifest) -> tuple[str, int]:
    http = container["readinessProbe"]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    port = http["port"]
    return http["path"], ports[port] if isinstance(port, str) else port
