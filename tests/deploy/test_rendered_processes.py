"""The processes the manifests start serve: each container's command line and environment,
exactly as rendered (the Secret's values, the pod's name, the ConfigMap's deployment file),
run as real processes on loopback, serve a request on each path.

Each pod's stable DNS name stands for an address of its own here: the test maps every
instance's host name to a loopback address 127.0.0.N (what the cluster DNS and the pod's
/etc/hosts do in a cluster) and nothing else in the file changes. What this does not cover is
the cluster itself (docs/deploy.md, "What is tested on this machine")."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from k8s_checks import Manifest, pod_file, pod_templates, write_description

from prfaas.deploy.render import Rendered, render
from prfaas.serve.config.deployment import free_port

pytestmark = pytest.mark.e2e

DEPLOYMENT = """\
model: prfaas-1t
block_tokens: 16
threshold_tokens: 128
router: {{port: {router_port}}}
emulation: {{time_factor: 0.01, byte_factor: 0.001}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
     capacity_mib: 8192}}
  - {{name: pdp-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
"""
DESCRIPTION = """\
deployment: deployment.yaml
http_port: {http_port}
transfer_port: {transfer_port}
router: {{cluster: pd}}
clusters:
  prfaas: {{image: img, addresses: {{prfaas-0: 10.0.0.1}}}}
  pd: {{image: img, addresses: {{pdp-0: 10.0.1.1, pdd-0: 10.0.1.2}}}}
"""
START_TIMEOUT_S = 120.0


def _pod_file_on_loopback(rendered: Rendered) -> str:
    """The ConfigMap's file with each pod's DNS name replaced by a loopback address."""
    pods_file = pod_file(rendered.manifests["pd"])
    for n, instance in enumerate(pods_file["instances"]):
        instance["host"] = f"127.0.0.{20 + n}"
    return yaml.safe_dump(pods_file)


def _environment(container: Manifest, pod: str, secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it, over this test's own (minus
    any PRFAAS_ variable, so only the pod's reach the process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRFAAS_")}
    for variable in container["env"]:
        source = variable.get("valueFrom", {})
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif "secretKeyRef" in source:
            env[variable["name"]] = secret[source["secretKeyRef"]["key"]]
        else:
            assert source["fieldRef"]["fieldPath"] == "metadata.name"
            env[variable["name"]] = pod
    return env


def _argv(container: Manifest, pod: str, env: dict[str, str], file_path: Path) -> list[str]:
    """The container's command with `$(VAR)` expanded from its environment (as the kubelet
    does), the mounted file's path mapped to this test's copy, and python this one."""
    python, *rest = container["command"]
    assert python == "python"
    argv = [sys.executable]
    for arg in rest:
        expanded = str(file_path) if arg.startswith("/etc/prfaas/config/") else arg
        for name, value in env.items():
            expanded = expanded.replace(f"$({name})", value)
        argv.append(expanded)
    return argv


@contextmanager
def _pods(rendered: Rendered, file_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every pod of both clusters as a process; stopped (by its own pid) on the way out."""
    started: list[subprocess.Popen[bytes]] = []
    secret = rendered.secrets["pd"]["stringData"]
    try:
        for objects in rendered.manifests.values():
            for workload in pod_templates(objects):
                [container] = workload["spec"]["template"]["spec"]["containers"]
                name = workload["metadata"]["name"]
                pods = [name] if workload["kind"] == "Deployment" else [
                    f"{name}-{i}" for i in range(workload["spec"]["replicas"])
                ]  # fmt: skip
                for pod in pods:
                    env = _environment(container, pod, secret)
                    argv = _argv(container, pod, env, file_path)
                    started.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
        yield started
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_ok(url: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        exited = [p.args for p in processes if p.poll() is not None]
        assert not exited, f"exited during start: {exited}"
        try:
            if httpx.get(url + "/health", timeout=1.0).json().get("status") == "ok":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.25)
    pytest.fail(f"the rendered deployment was not healthy within {START_TIMEOUT_S} s")


def test_the_rendered_pods_serve_both_paths(tmp_path: Path) -> None:
    router_port, http_port, transfer_port = free_port(), free_port(), free_port()
    deployment = DEPLOYMENT.format(router_port=router_port)
    description = DESCRIPTION.format(http_port=http_port, transfer_port=transfer_port)
    rendered = render(write_description(tmp_path, deployment, description))
    file_path = tmp_path / "pods.yaml"
    file_path.write_text(_pod_file_on_loopback(rendered))
    url = f"http://127.0.0.1:{router_port}"
    with _pods(rendered, file_path) as processes:
        assert len(processes) == 4  # the router and three instances
        _wait_until_ok(url, processes)
        paths = {}
        for prompt in ("Hello there", "a long prompt " * 40):
            body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4, "temperature": 0}
            answer = httpx.post(url + "/v1/completions", json=body, timeout=60.0)
            assert answer.status_code == 200, answer.text
            paths[len(prompt)] = answer.json()["prfaas"]["path"]
        assert sorted(paths.values()) == ["pd-p", "prfaas"]
