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
from k8s_checks import pod_file, write_description

from prfaas.deploy.pods import pod_processes
from prfaas.deploy.render import Rendered, render, write
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


@contextmanager
def _pods(out: Path, file_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every pod of both clusters as a process, as `prfaas.deploy.pods` reads them from the
    rendered files; stopped (by its own pid) on the way out."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        for pod in pod_processes(out, file_path, sys.executable, os.environ):
            started.append(subprocess.Popen(pod.argv, env=pod.env, stdout=subprocess.DEVNULL))
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
    write(rendered, tmp_path / "out")
    file_path = tmp_path / "pods.yaml"
    file_path.write_text(_pod_file_on_loopback(rendered))
    url = f"http://127.0.0.1:{router_port}"
    with _pods(tmp_path / "out", file_path) as processes:
        assert len(processes) == 4  # the router and three instances
        _wait_until_ok(url, processes)
        paths = {}
        for prompt in ("Hello there", "a long prompt " * 40):
            body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": 4, "temperature": 0}
            answer = httpx.post(url + "/v1/completions", json=body, timeout=60.0)
            assert answer.status_code == 200, answer.text
            paths[len(prompt)] = answer.json()["prfaas"]["path"]
        assert sorted(paths.values()) == ["pd-p", "prfaas"]
