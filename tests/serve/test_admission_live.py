"""Admission control at the live router: the scheduler's policy, applied to a real emulated
deployment, answers 429 with Retry-After and OpenAI's error JSON, and /metrics counts it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from serve_helpers import emulated_instance, running

from prfaas.scheduler import admission_policy
from prfaas.serve.config.admission_spec import AdmissionSpec
from prfaas.serve.config.deployment import Deployment, EmulationSpec, InstanceRole, RouterSpec
from prfaas.serve.launch.launcher import Launcher


def _deployment(admission: AdmissionSpec) -> Deployment:
    return Deployment(
        model="prfaas-1t",
        block_tokens=16,
        threshold_tokens=128,
        router=RouterSpec(port=0, admission=admission),
        emulation=EmulationSpec(time_factor=0.01, byte_factor=1 / 1024),
        instances=(
            emulated_instance("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas", "h200"),
            emulated_instance("pdp-0", InstanceRole.PD_PREFILL, "pd", "h20"),
            emulated_instance("pdd-0", InstanceRole.PD_DECODE, "pd", "h20"),
        ),
    )


@pytest.fixture(scope="module")
def shedding() -> Iterator[Launcher]:
    """A TTFT objective no prefill can meet: every request is predicted late and refused."""
    with running(
        _deployment(AdmissionSpec(mode="shed", ttft_slo_s=1e-9)), timeout_s=60
    ) as launcher:
        yield launcher


@pytest.mark.e2e
def test_shed_answers_429_with_retry_after_and_counts_it(shedding: Launcher) -> None:
    body = {"model": "prfaas-1t", "prompt": "a prompt " * 8, "max_tokens": 4}
    for stream in (False, True):
        response = httpx.post(
            shedding.url + "/v1/completions", json={**body, "stream": stream}, timeout=60
        )
        assert response.status_code == 429, response.text
        assert int(response.headers["retry-after"]) >= 1
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
        assert "predicted-ttft-over-slo" in error["message"]
    metrics = httpx.get(shedding.url + "/metrics", timeout=10).text
    assert 'prfaas:admission_rejections_total{reason="predicted-ttft-over-slo"} 2.0' in metrics
    assert 'prfaas:requests_total{outcome="rejected",status="429"} 2.0' in metrics


def test_admission_off_when_asked_and_policy_built_from_spec() -> None:
    off = _deployment(AdmissionSpec(mode="off")).router.admission
    assert admission_policy(off, off.ttft_slo_s) is None  # default: shed
    spec = AdmissionSpec(mode="defer", ttft_slo_s=5, max_defer_s=12)
    policy = admission_policy(spec, spec.ttft_slo_s)
    assert policy is not None and policy.config.max_defer_s == 12
    with pytest.raises(ValueError, match="mode"):
        AdmissionSpec(mode="drop")  # type: ignore[arg-type]
