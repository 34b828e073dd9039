"""What the test bed tests share: the deployment they render, a bed that skips cleanly
where it cannot be built and checks on the way out that nothing of it is left, and an HTTP
client that lives in the bed's `client` host."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from prfaas.deploy.bed_deployment import HTTP_PORT, BedDeployment, deploy_on_bed
from prfaas.deploy.testbed import Testbed, WanSpec, open_testbed, unavailable_reason
from prfaas.serve.auth.control import control_key, signed_headers
from prfaas.serve.config.deployment import ADMIN_TOKEN_ENV_VAR
from prfaas.transfer.config import SECRET_ENV_VAR

T = TypeVar("T")

#: Emulated instances (cheap), t = 128; the slow loop on (its default: the router replicas
#: share its lease), though it acts on nothing in a test (fewer than its `min_samples`).
DEPLOYMENT = """\
model: prfaas-1t
block_tokens: 16
threshold_tokens: 128
link: {{rate_gbps: 1.0}}
router: {{port: 8000, poll_interval_s: 0.5}}
emulation: {{time_factor: {time_factor}, byte_factor: 0.001}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
     capacity_mib: 8192}}
  - {{name: pdp-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
{extra_instances}"""
#: A second PD decode instance, which the slow-loop lease tests flip to PD prefill and back.
SECOND_DECODE = """\
  - {name: pdd-1, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}
"""
WAN = WanSpec(rate_bits_per_s=1e9, one_way_delay_s=0.005)
START_TIMEOUT_S = 180.0
SHORT_PROMPT = "Hello there"  # under t: PD-P
LONG_PROMPT = "a long prompt " * 40  # over t: PrfaaS


@contextmanager
def bed_or_skip(tmp_path: Path) -> Iterator[Testbed]:
    """A bed (skipped with the reason where none can be built); afterwards, nothing of it
    may be left on the host: no namespace, hosts file, process or delay line."""
    reason = unavailable_reason(WAN)
    if reason is not None:
        pytest.skip(reason)
    with open_testbed(WAN, tmp_path) as bed:
        yield bed
    assert bed.leftovers() == []


@contextmanager
def running(
    bed: Testbed,
    tmp_path: Path,
    *,
    replicas: int = 1,
    time_factor: float = 0.01,
    extra_instances: str = "",
) -> Iterator[BedDeployment]:
    """The deployment rendered and started on the bed, every pod ready."""
    yaml_text = DEPLOYMENT.format(time_factor=time_factor, extra_instances=extra_instances)
    deployed = deploy_on_bed(bed, yaml_text, tmp_path, router_replicas=replicas)
    deployed.start()
    deployed.wait_ready(START_TIMEOUT_S)
    yield deployed


class BedClient:
    """HTTP from the bed's `client` host: every call runs on a pool of threads that joined
    that host's namespace (setns moves a thread, not the process)."""

    def __init__(self, deployed: BedDeployment, threads: int = 8) -> None:
        client_host = deployed.hosts["client"]
        self.pool = ThreadPoolExecutor(
            threads, initializer=deployed.bed.enter, initargs=(client_host,)
        )
        self.http = httpx.Client(timeout=60.0, limits=httpx.Limits(max_keepalive_connections=0))

    def submit(self, work: Callable[..., T], *args: Any) -> Future[T]:
        return self.pool.submit(work, *args)

    def call(self, work: Callable[..., T], *args: Any) -> T:
        return self.submit(work, *args).result()

    def complete(self, base_url: str, prompt: str, max_tokens: int = 4) -> httpx.Response:
        body = {"model": "prfaas-1t", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        return self.call(self._post, base_url + "/v1/completions", body)

    def _post(self, url: str, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(url, json=body)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.http.close()


@contextmanager
def bed_client(deployed: BedDeployment, threads: int = 8) -> Iterator[BedClient]:
    client = BedClient(deployed, threads)
    try:
        yield client
    finally:
        client.close()


def needs_haproxy() -> str:
    path = shutil.which("haproxy")
    if path is None:
        pytest.skip("HAProxy is needed (Debian package haproxy; `make test` installs it)")
    return path


def start_balancer(deployed: BedDeployment, work: Path) -> str:
    """HAProxy in front of every router replica (`BedDeployment.start_balancer`)."""
    return deployed.start_balancer(needs_haproxy(), work, START_TIMEOUT_S)


class BedAdmin:
    """The operator's calls from the `client` host: each router replica's `/admin/*` (its
    bearer token, as every admin call) and each instance's control API (signed with the
    transfer secret, as the routers sign theirs; by address: the test process does not
    read the bed's hosts files)."""

    def __init__(self, deployed: BedDeployment, client: BedClient) -> None:
        routers = [p for p in deployed.pods if p.container == "router"]
        [token] = {p.env[ADMIN_TOKEN_ENV_VAR] for p in routers}
        [secret] = {p.env[SECRET_ENV_VAR] for p in routers}
        self.deployed, self.client = deployed, client
        self._headers = {"authorization": f"Bearer {token}"}
        self._key = control_key(secret.encode())

    def state(self, router: str) -> dict[str, Any] | None:
        """The replica's `/admin/state` (None: no answer, a killed replica)."""
        url = self.deployed.router_url(router) + "/admin/state"
        try:
            answer = self.client.call(lambda: self.client.http.get(url, headers=self._headers))
        except httpx.HTTPError:
            return None
        found: dict[str, Any] = answer.json()
        return found

    def flip(self, router: str, instance: str, role: str) -> httpx.Response:
        """A flip by hand, asked of `router` (`/admin/instances/{name}/role`)."""
        url = f"{self.deployed.router_url(router)}/admin/instances/{instance}/role"
        body = {"role": role}
        return self.client.call(
            lambda: self.client.http.post(url, json=body, headers=self._headers)
        )

    def instance(self, name: str, method: str, path: str, body: Any = None) -> httpx.Response:
        """A signed control call to instance `name` (`path`: `/state`, `/role`, ...)."""
        content = b"" if body is None else json.dumps(body).encode()
        headers = signed_headers(self._key, name, method, path, body=content)
        headers["content-type"] = "application/json"
        url = f"http://{self.deployed.hosts[name].address}:{HTTP_PORT}{path}"

        def send() -> httpx.Response:
            return self.client.http.request(method, url, content=content, headers=headers)

        return self.client.call(send)
