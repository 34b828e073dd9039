"""A rendered deployment running on a test bed (`deploy.testbed`), pod by pod.

    deploy_on_bed(bed, deployment_yaml, work, router_replicas=3)
        1. a host per pod: instances in their cluster's datacenter, routers in the
           router's cluster, plus `client` and `lb` hosts there (for a test's client and a
           load balancer)
        2. a description giving every instance its host's address, rendered with the CLI
           (`python -m prfaas deploy render`), as an operator would
        3. the commands read back from the output (`deploy.pods`), every pod's DNS name
           written into every host's /etc/hosts (what the cluster DNS answers), and each
           pod started in its host with `ip netns exec` and exactly its container's
           environment
        4. `wait_ready`: every pod answers its rendered readiness probe
        5. `start_balancer`: HAProxy (`deploy.balancer`) on the `lb` host in front of
           the router replicas

The description's cluster names are the deployment's `cluster` fields; the bed has two
datacenters, so a deployment here has two clusters (`DATACENTERS`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from prfaas.deploy.balancer import ROUTER_HEADER, haproxy_config
from prfaas.deploy.layout import ROUTER_PORT
from prfaas.deploy.pods import PodProcess, pod_file, pod_processes
from prfaas.deploy.testbed import Host, Testbed
from prfaas.serve.config.deployment import load_deployment
from prfaas.transfer.errors import LinkEmulationError

DATACENTERS = {"prfaas": 0, "pd": 1}
HTTP_PORT = 8001
TRANSFER_PORT = 9001
PROBE_TIMEOUT_S = 1.0
BALANCER_PORT = 8080


@dataclass(slots=True)
class BedDeployment:
    bed: Testbed
    pods: list[PodProcess]
    hosts: dict[str, Host]  # pod name (and "client", "lb") -> host
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def routers(self) -> list[str]:
        return [p.pod for p in self.pods if p.container == "router"]

    def router_url(self, pod: str) -> str:
        return f"http://{self.hosts[pod].address}:{ROUTER_PORT}"

    def start(self) -> None:
        for pod in self.pods:
            self.processes[pod.pod] = self.bed.start(self.hosts[pod.pod], pod.argv, pod.env)

    def wait_ready(self, timeout_s: float) -> None:
        """Until every pod answers its readiness probe with 200 (from the `client` host);
        a pod that exits meanwhile, or the deadline, is a `LinkEmulationError`."""
        waiting = {p.pod: p for p in self.pods}
        deadline = time.monotonic() + timeout_s
        while waiting:
            exited = [n for n in waiting if self.processes[n].poll() is not None]
            if exited:
                raise LinkEmulationError(f"exited while starting: {', '.join(exited)}")
            if time.monotonic() > deadline:
                raise LinkEmulationError(f"not ready within {timeout_s} s: {sorted(waiting)}")
            for name in [n for n, pod in waiting.items() if self._is_ready(pod)]:
                del waiting[name]
            time.sleep(0.25)

    def _is_ready(self, pod: PodProcess) -> bool:
        path, port = pod.readiness
        return self.get(f"http://{self.hosts[pod.pod].address}:{port}{path}")[0] == 200

    def get_status(self, url: str) -> int | None:
        """The status of `GET url` from the `client` host (None: no answer)."""
        return self.get(url)[0]

    def get(self, url: str) -> tuple[int | None, dict[str, str]]:
        """The status and headers (names in lower case) of `GET url` from the `client`
        host (None: no answer)."""
        answer: list[tuple[int | None, dict[str, str]]] = [(None, {})]

        def get() -> None:
            self.bed.enter(self.hosts["client"])
            try:
                with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
                    answer[0] = (response.status, _lower(response.headers.items()))
            except urllib.error.HTTPError as err:
                answer[0] = (err.code, _lower(err.headers.items()))
            except OSError:
                pass

        thread = threading.Thread(target=get)
        thread.start()
        thread.join()
        return answer[0]

    def start_balancer(
        self, haproxy: str, work: Path, timeout_s: float, behind: Sequence[str] | None = None
    ) -> str:
        """HAProxy on the `lb` host in front of the router replicas `behind` (default:
        every one; fewer for a control run where the others run but take no request); its
        URL, once a round of `/health` calls through it has reached each of them."""
        behind = self.routers if behind is None else list(behind)
        routers = [(r, self.hosts[r].address, ROUTER_PORT) for r in behind]
        config = work / "haproxy.cfg"
        config.write_text(haproxy_config(routers, port=BALANCER_PORT))
        lb = self.hosts["lb"]
        self.processes["lb"] = self.bed.start(lb, [haproxy, "-f", str(config), "-db"], {})
        url = f"http://{lb.address}:{BALANCER_PORT}"
        deadline = time.monotonic() + timeout_s
        seen: set[str] = set()
        while seen != set(behind):
            if time.monotonic() > deadline or self.processes["lb"].poll() is not None:
                raise LinkEmulationError(f"HAProxy reached only {sorted(seen)}")
            status, headers = self.get(url + "/health")
            if status == 200:
                seen.add(headers[ROUTER_HEADER.lower()])
            time.sleep(0.1)
        return url


def _lower(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}


def _description(deployment_file: Path, addresses: dict[str, dict[str, str]], replicas: int) -> str:
    return yaml.safe_dump(
        {
            "deployment": deployment_file.name,
            "http_port": HTTP_PORT,
            "transfer_port": TRANSFER_PORT,
            "router": {"cluster": "pd", "replicas": replicas, "service_type": "ClusterIP"},
            "clusters": {
                cluster: {"image": "prfaas:testbed", "addresses": dict(by_name)}
                for cluster, by_name in addresses.items()
            },
        }
    )


def deploy_on_bed(
    bed: Testbed, deployment_yaml: str, work: Path, *, router_replicas: int = 1
) -> BedDeployment:
    """The deployment's pods on hosts of `bed`, not yet started (module docstring)."""
    deployment_file = work / "deployment.yaml"
    deployment_file.write_text(deployment_yaml)
    deployment = load_deployment(deployment_file)
    hosts: dict[str, Host] = {}
    addresses: dict[str, dict[str, str]] = {cluster: {} for cluster in DATACENTERS}
    for spec in deployment.instances:
        hosts[spec.name] = bed.add_host(spec.name, DATACENTERS[spec.cluster])
        addresses[spec.cluster][spec.name] = hosts[spec.name].address
    description = work / "description.yaml"
    description.write_text(_description(deployment_file, addresses, router_replicas))
    out = work / "rendered"
    subprocess.run(
        [sys.executable, "-m", "prfaas", "deploy", "render", str(description), "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    file_path = work / "pods-deployment.yaml"
    pods_file = pod_file(out)
    file_path.write_text(yaml.safe_dump(pods_file))
    pods = pod_processes(out, file_path, sys.executable, os.environ)
    for pod in pods:
        if pod.pod not in hosts:  # a router replica
            hosts[pod.pod] = bed.add_host(pod.pod, DATACENTERS["pd"])
    for extra in ("client", "lb"):
        hosts[extra] = bed.add_host(extra, DATACENTERS["pd"])
    names = {i["host"]: hosts[i["name"]].address for i in pods_file["instances"]}
    bed.resolve(names)
    return BedDeployment(bed, pods, hosts)
