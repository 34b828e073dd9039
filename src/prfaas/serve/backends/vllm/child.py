"""The `vllm serve` child of a `vllm` instance: its interpreter, environment, the connector's
configuration and how it is signalled.

`serve.backends.vllm.backend` starts one child per instance with these; the connector inside it
(`prfaas.integrations.vllm`) reads `connector_config` back as its `ConnectorSettings`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prfaas.serve.config.deployment import Deployment, InstanceSpec
from prfaas.serve.config.parallelism_spec import vllm_flags
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.kv_shipping import shipping_plan
from prfaas.transfer.config import SECRET_ENV_VAR

SINK_BYTES = 256 * 2**20  # the connector's receive buffer
CHILD_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def vllm_environment(settings: VllmSpec) -> dict[str, str]:
    """The environment of a `vllm serve` child: this process's, vLLM's fixed settings, and
    the deployment's cache size and CPU placement."""
    return {
        **os.environ,
        **CHILD_ENV,
        "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": settings.cpu_threads_bind,
    }


def vllm_python() -> Path:
    """The vLLM venv's interpreter: `$PRFAAS_VLLM_PYTHON`, else the repository's .venv-vllm."""
    configured = os.environ.get("PRFAAS_VLLM_PYTHON")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[5] / ".venv-vllm" / "bin" / "python"


def connector_config(
    deployment: Deployment, spec: InstanceSpec, status_path: Path
) -> dict[str, Any]:
    """The connector's `kv_connector_extra_config` (`integrations.vllm.settings`): the
    instance's shipping plan, resolved as the shell's own (`kv_shipping.shipping_plan`: TLS, the
    link's token bucket and RTT or its namespaces), and where to find the secret (never here:
    vLLM logs this config)."""
    plan = shipping_plan(deployment, spec, SINK_BYTES)
    return {
        "shipping": asdict(plan),
        "secret_env": SECRET_ENV_VAR,
        "hash_seed": deployment.hash_seed,
        "status_path": str(status_path),
        # a transfer whose decode never came (its router gave up) is dropped after this
        "staged_ttl_s": deployment.router.request_timeout_s,
        "load_timeout_s": deployment.router.request_timeout_s,
    }


def signal_group(child: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """`sig` to the child's whole process group (vLLM spawns its engine core and workers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)


@dataclass(frozen=True, slots=True)
class ChildPorts:
    """Where the child answers (its OpenAI API), publishes KV events, and where its
    connector writes its status file."""

    http_port: int
    events_port: int
    status_path: Path


def serve_command(
    python: Path, model_dir: Path, deployment: Deployment, spec: InstanceSpec, ports: ChildPorts
) -> list[str]:
    """`vllm serve` for instance `spec`, with the connector, the KV event publisher and the
    flags that run the instance's `parallelism` (none without one: the engine's defaults)."""
    transfer = {
        "kv_connector": "PrfaasConnector",
        "kv_connector_module_path": "prfaas.integrations.vllm.connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": connector_config(deployment, spec, ports.status_path),
    }
    events = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://{spec.host}:{ports.events_port}",
        "topic": "kv-events",
    }
    s = deployment.vllm
    split = deployment.split_of(spec)
    return [
        str(python), "-m", "prfaas.integrations.vllm.serve_main", "serve",
        str(model_dir),
        "--host", spec.host,
        "--port", str(ports.http_port),
        "--served-model-name", deployment.model_name,
        "--enforce-eager",
        "--max-model-len", str(s.max_model_len),
        "--max-num-seqs", str(spec.max_batch_size),
        "--enable-prefix-caching",  # hybrid models: vLLM's "align" mamba cache mode
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",  # the shell polls it twice a second; the router logs
        "--kv-transfer-config", json.dumps(transfer),
        "--kv-events-config", json.dumps(events),
        *(["--dtype", s.dtype] if s.dtype else []),
        *([] if split is None else vllm_flags(split)),
        *s.extra_args,
    ]  # fmt: skip
