"""Start scripts for the rendered pods, for hosts or namespaces that are not Kubernetes.

`prfaas deploy render` writes what a kubelet runs; an operator who places the pods by hand
(plain hosts, namespaces of their own, another orchestrator) needs the same command lines and
environments without re-deriving them from the YAML. `write_pod_scripts` reads them back with
`deploy.pods` (the reader the test bed starts its pods with) and writes, per pod:

    <pod>.env   the container's environment as shell assignments, mode 0600: it holds the
                transfer secret and the admin token, which must not appear on a command
                line (`ps` shows command lines to every user)
    <pod>.sh    sources its .env with every inherited `PRFAAS_*` variable unset first (only the
                pod's own reach it, as in a container), then execs the container's command

and one `deployment.yaml`, the ConfigMap's file, which every command reads. Scripts name it
and their .env by absolute path: moving the directory means writing it again.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from prfaas.deploy.pods import PodProcess, pod_file, pod_processes

DEPLOYMENT_FILE = "deployment.yaml"

_UNSET_INHERITED = (
    'for name in $(env | sed -n "s/^\\(PRFAAS_[A-Za-z0-9_]*\\)=.*/\\1/p"); do unset "$name"; done'
)


@dataclass(frozen=True, slots=True)
class PodScript:
    pod: PodProcess
    script: Path


def write_pod_scripts(out: Path, to: Path, python: str) -> list[PodScript]:
    """Scripts for every pod rendered under `out`, written to `to` (module docstring);
    `python` is the interpreter with prfaas installed (the image's `python`)."""
    to = to.resolve()
    to.mkdir(parents=True, exist_ok=True)
    file_path = to / DEPLOYMENT_FILE
    file_path.write_text(yaml.safe_dump(pod_file(out), sort_keys=False))
    written = []
    for pod in pod_processes(out, file_path, python, base_env={}):
        env_path = to / f"{pod.pod}.env"
        _write_private(env_path, "".join(f"{k}={shlex.quote(v)}\n" for k, v in pod.env.items()))
        script = to / f"{pod.pod}.sh"
        script.write_text(_script(pod, env_path))
        script.chmod(0o755)
        written.append(PodScript(pod, script))
    return written


def _write_private(path: Path, text: str) -> None:
    """Created 0600 before anything is written: the secret is never readable by others."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _script(pod: PodProcess, env_path: Path) -> str:
    path, port = pod.readiness
    return "\n".join(
        [
            "#!/bin/sh",
            f"# pod {pod.pod} of cluster {pod.cluster} ({pod.container}): ready when "
            f"GET {path} on port {port} answers 200",
            _UNSET_INHERITED,
            f"set -a; . {shlex.quote(str(env_path))}; set +a",
            f"exec {shlex.join(pod.argv)}",
            "",
        ]
    )
