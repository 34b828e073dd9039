"""The description `prfaas deploy render` reads: a deployment file and where it runs.

    deployment: ../../configs/case-study-prfaas-pd.yaml   # relative to this file
    namespace: prfaas                 # the same in every cluster (the DNS names below)
    cluster_domain: cluster.local     # the same in every cluster
    http_port: 8001                   # every instance's control API (each pod has its own IP)
    transfer_port: 9001               # every instance's KV listener
    router: {cluster: pd, replicas: 1, service_type: LoadBalancer}
    grafana_dashboard: ../../docs/grafana/prfaas-router.json
    clusters:                         # one entry per `cluster` of the deployment's instances
      prfaas:
        image: registry.example/prfaas:cuda
        accelerator: nvidia           # instance pods request gpus_per_instance (tp x dp) GPUs
        addresses: {prfaas-0: 10.20.0.10}   # where the other cluster reaches each instance
      pd: {image: registry.example/prfaas:cuda, accelerator: nvidia, addresses: {...}}

The deployment file is the one `prfaas up` runs, unchanged: instance names, roles, clusters
and every knob come from it, so the manifests cannot disagree with it. What a cluster adds is
here: the image, whether instances get GPUs, and, when there are several clusters, the address
(a reserved LoadBalancer IP) at which the other cluster reaches each instance.
"""

from __future__ import annotations

import ipaddress
import json
from enum import StrEnum
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prfaas.serve.config.deployment import validation_problems
from prfaas.serve.errors import DeploymentError

#: An RFC 1123 label: what Kubernetes accepts as a Service, StatefulSet or namespace name.
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Accelerator(StrEnum):
    """What an instance pod asks the scheduler for besides CPU and memory."""

    NONE = "none"  # the CPU image: emulated instances, the torch reference engine
    NVIDIA = "nvidia"  # `gpus_per_instance` x nvidia.com/gpu (NVIDIA's device plugin)


class ServiceType(StrEnum):
    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class RouterPlacement(_Strict):
    """Where the router runs and how clients reach it: `replicas` routers behind the
    Service, each routing on what the instances report; one at a time runs the slow loop
    (the lease of `serve.router.lease`)."""

    cluster: str
    replicas: int = Field(default=1, ge=1)
    service_type: ServiceType = ServiceType.LOAD_BALANCER


class ClusterSpec(_Strict):
    image: str = Field(min_length=1)
    accelerator: Accelerator = Accelerator.NONE
    # instance name -> the IPv4 address the other cluster dials (a reserved LoadBalancer IP)
    addresses: dict[str, str] = Field(default_factory=dict)
    # on every exposed instance's LoadBalancer Service (internal LB, IP pinning: per provider)
    service_annotations: dict[str, str] = Field(default_factory=dict)

    @field_validator("addresses")
    @classmethod
    def _ipv4(cls, addresses: dict[str, str]) -> dict[str, str]:
        for name, address in addresses.items():
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                raise ValueError(f"{name}: {address!r} is not an IPv4 address") from None
        return addresses


class ModelVolume(_Strict):
    """A PersistentVolumeClaim holding the checkpoint, mounted read-only in every instance
    pod at `mount_path` (the deployment's `model` is a path under it)."""

    claim: str = Field(pattern=DNS_LABEL)
    mount_path: str = Field(pattern=r"^/")


class Description(_Strict):
    deployment: str = Field(min_length=1)
    namespace: str = Field(default="prfaas", pattern=DNS_LABEL)
    cluster_domain: str = Field(default="cluster.local", min_length=1)
    http_port: int = Field(default=8001, ge=1, le=65535)
    transfer_port: int = Field(default=9001, ge=1, le=65535)
    router: RouterPlacement
    clusters: dict[str, ClusterSpec]
    grafana_dashboard: str | None = None
    model_volume: ModelVolume | None = None


def load_description(path: Path) -> Description:
    """The description at `path`, strictly typed as deployment files are; every problem is
    one line of a `DeploymentError`."""
    try:
        raw = yaml.safe_load(path.read_text())
        return Description.model_validate_json(json.dumps(raw, default=str), strict=True)
    except OSError as err:
        raise DeploymentError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise DeploymentError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    except ValidationError as err:
        raise DeploymentError(*validation_problems(str(path), err)) from None


def beside(description_path: Path, relative: str) -> Path:
    """A path the description names, read relative to the description's own directory."""
    return (description_path.parent / relative).resolve()
