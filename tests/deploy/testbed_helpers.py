"""What the test bed tests share: the deployment they render, a bed that skips cleanly
where it cannot be built and checks on the way out that nothing of it is left, and an HTTP
client that lives in the bed's `client` host."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from prfaas.deploy.bed_deployment import BedDeployment, deploy_on_bed
from prfaas.deploy.testbed import Testbed, WanSpec, open_testbed, unavailable_reason

T = TypeVar("T")

#: Emulated instances (cheap), two PrfaaS prefill instances so one can be lost, t = 128.
DEPLOYMENT = """\
model: prfaas-1t
block_tokens: 16
threshold_tokens: 128
link: {{rate_gbps: 1.0}}
rebalance: {{enabled: false}}
router: {{port: 8000, poll_interval_s: 0.5}}
emulation: {{time_factor: {time_factor}, byte_factor: 0.001}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
     capacity_mib: 8192}}
  - {{name: pdp-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20,
     capacity_mib: 8192}}
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
    bed: Testbed, tmp_path: Path, *, replicas: int = 1, time_factor: float = 0.01
) -> Iterator[BedDeployment]:
    """The deployment rendered and started on the bed, every pod ready."""
    yaml_text = DEPLOYMENT.format(time_factor=time_factor)
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
