"""The deployment file and every other knob of `serve`: the one module that reads the environment.

A deployment names the model, the router, every instance (role, cluster, host, ports), the
inter-cluster link and the transfer secret. The same file starts one host's processes or all
of them (`prfaas up`). Ports set to 0 are picked free at launch (single-host only).

    model: tiny-qwen3-next
    threshold_tokens: 96            # t: uncached prompt tokens above which prefill goes remote
    router: {host: 127.0.0.1, port: 8000}
    link: {rate_gbps: 1.0, rtt_ms: 20, shaping: auto}   # auto: kernel shaping when root
    instances:
      - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas}
      - {name: pdp-0, role: pd-prefill, cluster: pd}
      - {name: pdd-0, role: pd-decode, cluster: pd}

Instances run the `torch` backend (real model compute) by default; `backend: emulated` with a
`chip` runs a catalog model (`model: prfaas-1t`) without compute, timed by the chip's
PerfProfile x `emulation.time_factor`, shipping its KV x `emulation.byte_factor` (serve.emulated,
docs/serving.md). One deployment uses one backend: their KV cannot be exchanged.

The secret comes from the file's `secret` or `PRFAAS_TRANSFER_SECRET` (transfer.config); when
neither is set the launcher generates one per run and hands it to its children in that variable.
`tls` wraps every KV transfer connection in TLS (files from the file or `PRFAAS_TLS_*_FILE`).
"""

from __future__ import annotations

import os
import secrets
import socket
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prfaas.serve.backends.vllm_spec import VllmSpec
from prfaas.serve.errors import DeploymentError
from prfaas.specs.catalog import get_chip, model_names
from prfaas.specs.errors import SpecError
from prfaas.transfer.config import SECRET_ENV_VAR, TlsConfig
from prfaas.transfer.errors import ConfigError

#: Environment of child processes: offline model hub, one torch thread per process.
CHILD_ENV = {
    "HF_HUB_OFFLINE": "1",
    "USE_HUB_KERNELS": "NO",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class InstanceRole(StrEnum):
    PRFAAS_PREFILL = "prfaas-prefill"
    PD_PREFILL = "pd-prefill"
    PD_DECODE = "pd-decode"

    @property
    def is_prefill(self) -> bool:
        return self is not InstanceRole.PD_DECODE


class Backend(StrEnum):
    TORCH = "torch"
    EMULATED = "emulated"
    VLLM = "vllm"  # a managed `vllm serve` child (serve.backends.vllm)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RouterSpec(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    max_body_bytes: int = Field(default=1_000_000, gt=0)
    poll_interval_s: float = Field(default=0.2, gt=0)
    request_timeout_s: float = Field(default=120.0, gt=0)
    cache_moves: bool = True  # carry out the scheduler's cross-cluster prefix moves (torch)
    decode_reuse: bool = True  # ship only the attention KV the decode instance lacks (torch)


class LinkShaping(StrEnum):
    """How the PrfaaS -> PD link is emulated on one host (`prfaas up`)."""

    AUTO = "auto"  # kernel when root with iproute2, else token-bucket (the reason is logged)
    KERNEL = "kernel"  # tbf on a veth/TUN pair between two network namespaces; fail if impossible
    TOKEN_BUCKET = "token-bucket"  # the sender's token bucket plus a user-space delay


class NamespaceLink(_Strict):
    """Where the kernel-shaped link lives; written by `prfaas up` once it built it, never by hand.
    PrfaaS senders open their sockets in `sender_netns`; decode instances also listen in
    `receiver_netns` at `receiver_ip` on their `transfer_port`."""

    sender_netns: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    receiver_netns: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    sender_ip: str
    receiver_ip: str


class LinkSpec(_Strict):
    """The PrfaaS -> PD link: kernel-shaped in network namespaces, or a token bucket on the
    sender plus a user-space delay (`shaping`; `netns` and `shaping_reason` are set by the
    launcher when it resolves `auto`)."""

    rate_gbps: float = Field(default=1.0, gt=0)
    rtt_ms: float = Field(default=20.0, ge=0)
    shaping: LinkShaping = LinkShaping.AUTO
    netns: NamespaceLink | None = None
    shaping_reason: str | None = None

    @property
    def rate_bytes_per_s(self) -> float:
        return self.rate_gbps * 1e9 / 8

    @property
    def is_kernel_shaped(self) -> bool:
        """Whether this process should use the namespaces (else: token bucket and delay)."""
        return self.netns is not None

    @property
    def shaping_in_force(self) -> str:
        return "kernel" if self.is_kernel_shaped else LinkShaping.TOKEN_BUCKET.value


class TlsSpec(_Strict):
    """TLS around every KV transfer connection (the inter-cluster link, and the PD cluster's
    own transfers, since one listener serves both). Files come from here or, when left out,
    from `$PRFAAS_TLS_CERT_FILE`, `$PRFAAS_TLS_KEY_FILE`, `$PRFAAS_TLS_CA_FILE`. Every
    instance presents `cert_file` (valid for `server_hostname`) and verifies its peers against
    `ca_file`. TLS encrypts; the HMAC handshake still authenticates (docs/protocol.md)."""

    enabled: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    ca_file: str | None = None
    server_hostname: str = Field(default="prfaas-transfer", min_length=1)


class RebalanceSpec(_Strict):
    """The router's long-timescale loop (docs/serving.md, "Role flips and the slow loop"): every
    `period_s` it runs the scheduler's `RebalancePolicy` on what it observed (post-match
    lengths, PD-P busy time, PD-D batch occupancy, queues, the link rate), applies a new t and
    flips PD instances between pd-prefill and pd-decode, draining them first. `enabled: false`
    turns it off (t stays `threshold_tokens`, roles stay as written)."""

    enabled: bool = True
    period_s: float = Field(default=60.0, gt=0)
    min_samples: int = Field(default=50, gt=0)
    step_tokens: int = Field(default=64, gt=0)
    busy_utilisation: float = Field(default=0.85, gt=0, le=1)
    idle_utilisation: float = Field(default=0.5, ge=0, le=1)
    queue_s: float = Field(default=10.0, ge=0)
    min_threshold_change: float = Field(default=0.05, ge=0)
    decode_slo_tokens_per_s: float = Field(default=20.0, gt=0)
    drain_timeout_s: float = Field(default=300.0, gt=0)


class EmulationSpec(_Strict):
    """How `emulated` instances scale the modelled deployment (docs/serving.md): every prefill
    and decode step sleeps `time_factor` x the PerfProfile's time, and every KV payload is
    `byte_factor` x the model's real cache bytes."""

    time_factor: float = Field(default=1.0, gt=0)
    byte_factor: float = Field(default=1 / 256, gt=0, le=1)
    max_context_tokens: int = Field(default=135_168, gt=0)


class InstanceSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    role: InstanceRole
    cluster: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    host: str = "127.0.0.1"
    http_port: int = Field(default=0, ge=0, le=65535)
    transfer_port: int = Field(default=0, ge=0, le=65535)
    capacity_mib: int = Field(default=64, gt=0)
    max_batch_size: int = Field(default=16, gt=0)
    backend: Backend = Backend.TORCH
    chip: str | None = None  # emulated only: the catalog chip whose PerfProfile times it
    gpus_per_instance: int = Field(default=8, gt=0)

    @model_validator(mode="after")
    def _chip_fits_backend(self) -> InstanceSpec:
        if self.backend is not Backend.EMULATED:
            if self.chip is not None:
                raise ValueError("chip is for emulated instances only (backend: emulated)")
            return self
        if self.chip is None:
            raise ValueError("an emulated instance needs a chip (e.g. h200, h20)")
        try:
            get_chip(self.chip)
        except SpecError as err:
            raise ValueError(str(err)) from None
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"


class Deployment(_Strict):
    model: str = "tiny-qwen3-next"
    served_model_name: str | None = None
    block_tokens: int = Field(default=16, gt=0)
    hash_seed: int = 0
    threshold_tokens: int = Field(default=96, ge=0)
    secret: str | None = None
    # XXH3 check of every KV payload byte (prfaas.transfer, docs/protocol.md). Off only when
    # every instance shares trusted hardware (one host, ECC memory): TCP's checksum is then
    # the only guard. One setting for the whole deployment, so every link agrees.
    payload_checks: bool = True
    router: RouterSpec = RouterSpec()
    link: LinkSpec = LinkSpec()
    emulation: EmulationSpec = EmulationSpec()
    rebalance: RebalanceSpec = RebalanceSpec()
    tls: TlsSpec | None = None  # None: plain TCP (the HMAC handshake still authenticates)
    vllm: VllmSpec = VllmSpec()  # backend: vllm instances (serve.backends.vllm_spec)
    instances: tuple[InstanceSpec, ...]

    @model_validator(mode="after")
    def _one_backend(self) -> Deployment:
        backends = {spec.backend for spec in self.instances}
        if len(backends) > 1:
            names = " and ".join(b.value for b in Backend if b in backends)
            raise ValueError(f"instances mix the {names} backends (their KV differs)")
        if Backend.EMULATED in backends and self.model not in model_names():
            known = ", ".join(model_names())
            raise ValueError(f"emulated instances need a catalog model (known: {known})")
        if Backend.VLLM in backends and not Path(self.model).is_dir():
            raise ValueError(f"vllm instances need a local model directory, not {self.model!r}")
        return self

    @property
    def backend(self) -> Backend:
        return self.instances[0].backend if self.instances else Backend.TORCH

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model

    def instance(self, name: str) -> InstanceSpec:
        for spec in self.instances:
            if spec.name == name:
                return spec
        raise DeploymentError(f"no instance named {name!r} in the deployment")


def default_deployment() -> Deployment:
    """One PrfaaS prefill, one PD-P, one PD-D; tiny Qwen3-Next; 1 Gbit/s, 20 ms RTT."""
    return Deployment(
        instances=(
            InstanceSpec(name="prfaas-0", role=InstanceRole.PRFAAS_PREFILL, cluster="prfaas"),
            InstanceSpec(name="pdp-0", role=InstanceRole.PD_PREFILL, cluster="pd"),
            InstanceSpec(name="pdd-0", role=InstanceRole.PD_DECODE, cluster="pd"),
        )
    )


def load_deployment(path: Path | None) -> Deployment:
    """The file at `path`, or the built-in default; errors are one-line `DeploymentError`s."""
    if path is None:
        return default_deployment()
    try:
        raw = yaml.safe_load(path.read_text())
        return Deployment.model_validate(raw)
    except OSError as err:
        raise DeploymentError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        detail = " ".join(str(err).split())  # PyYAML's message spans several lines
        raise DeploymentError(f"{path} is not valid YAML: {detail}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise DeploymentError(f"{path}: {where}: {first['msg']}") from None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def with_ports(deployment: Deployment) -> Deployment:
    """Every port left at 0 replaced by a free one (single host: the launcher's job)."""
    router = deployment.router
    if router.port == 0:
        router = router.model_copy(update={"port": free_port(router.host)})
    instances = tuple(
        spec.model_copy(
            update={
                "http_port": spec.http_port or free_port(spec.host),
                "transfer_port": spec.transfer_port or free_port(spec.host),
            }
        )
        for spec in deployment.instances
    )
    return deployment.model_copy(update={"router": router, "instances": instances})


def transfer_secret(deployment: Deployment) -> bytes:
    """The file's secret, else the environment's, else an error (never a default secret)."""
    if deployment.secret is not None:
        return deployment.secret.encode()
    value = os.environ.get(SECRET_ENV_VAR)
    if not value:
        raise DeploymentError(f"no transfer secret: set `secret` or ${SECRET_ENV_VAR}")
    return value.encode()


TLS_ENV_VARS = {
    "cert_file": "PRFAAS_TLS_CERT_FILE",
    "key_file": "PRFAAS_TLS_KEY_FILE",
    "ca_file": "PRFAAS_TLS_CA_FILE",
}


def transfer_tls(deployment: Deployment) -> TlsConfig | None:
    """The transfer layer's TLS files (the file's, else the environment's), None without TLS;
    a missing or unreadable file is a one-line `DeploymentError`."""
    spec = deployment.tls
    if spec is None or not spec.enabled:
        return None
    files: dict[str, str] = {}
    for field_name, env_var in TLS_ENV_VARS.items():
        value = getattr(spec, field_name) or os.environ.get(env_var)
        if not value:
            raise DeploymentError(f"tls is enabled but tls.{field_name} and ${env_var} are unset")
        if not Path(value).is_file():
            raise DeploymentError(f"tls.{field_name}: no such file {value}")
        files[field_name] = value
    tls = TlsConfig(server_hostname=spec.server_hostname, **files)
    try:
        tls.server_context()
        tls.client_context()
    except ConfigError as err:
        raise DeploymentError(str(err)) from None
    return tls


def child_environment(deployment: Deployment) -> dict[str, str]:
    """The environment the launcher gives every process: ours, offline, one thread, a secret."""
    env = dict(os.environ)
    env.update(CHILD_ENV)
    if deployment.secret is None and not env.get(SECRET_ENV_VAR):
        env[SECRET_ENV_VAR] = secrets.token_hex(24)
    return env
