"""The environment `vllm serve` children start in: cache size and CPU placement from the
deployment file (docs/vllm.md, CPU placement), the secret never on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.serve.backends.vllm.child import vllm_environment
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.errors import DeploymentError

INSTANCES = "instances:\n  - {name: pdd-0, role: pd-decode, cluster: pd}\n"


def test_engines_are_not_pinned_unless_the_deployment_says_so(tmp_path: Path) -> None:
    assert vllm_environment(VllmSpec())["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    deployment = tmp_path / "deploy.yaml"
    vllm = "vllm: {kv_cache_gib: 3, cpu_threads_bind: '0-15'}\n"
    deployment.write_text("model: tiny-llama\n" + vllm + INSTANCES)
    env = vllm_environment(load_deployment(deployment).vllm)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-15"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["HF_HUB_OFFLINE"] == "1"


def test_an_empty_binding_is_refused(tmp_path: Path) -> None:
    deployment = tmp_path / "deploy.yaml"
    deployment.write_text("model: tiny-llama\nvllm: {cpu_threads_bind: ''}\n" + INSTANCES)
    with pytest.raises(DeploymentError, match="cpu_threads_bind"):
        load_deployment(deployment)
