"""Instances as StatefulSets, their stable names, and the deployment file the pods read.

The instances of one cluster and one role are one StatefulSet, named by their common prefix:
`pdd-0`, `pdd-1`, `pdd-2` (pd-decode, cluster pd) are the pods of StatefulSet `pdd`, so a
pod's own name is its instance's `--name`. Each pod's `host` in the deployment file is its
stable DNS name through the StatefulSet's headless Service,

    pdd-1.pdd.<namespace>.svc.<cluster_domain>

which the pod binds (the kubelet writes it into the pod's /etc/hosts with the pod's IP) and
every other process dials: the router's `http_port` calls, KV to `transfer_port`, the
instance's `/info` (`transfer_host`), the allow-list of transfer peers. In the other cluster
the same name resolves to the address the description gives (`wiring.remote_instances`), so
one file serves every pod of both clusters.

What the pods' file changes from the description's deployment file (`pod_deployment`):

- every instance's `host` as above, its `http_port` and `transfer_port` the description's
  (one port number for all: every pod has its own IP); the router listens on 0.0.0.0;
- the transfer secret, admin token and API key are out of it (the Secret carries them, as
  environment variables); TLS files point into the Secret's mount (`TLS_DIR`);
- `link.rtt_ms` is 0 and `link.shaping` the token bucket: across real datacenters the WAN
  brings its own RTT, and no pod builds namespaces; `link.rate_gbps` stays (the scheduler's
  link capacity, and the PrfaaS senders' pace).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from prfaas.deploy.description import DNS_LABEL, Accelerator, Description
from prfaas.serve.config.deployment import Backend, Deployment, InstanceRole, InstanceSpec

#: Where the pods mount the deployment file (a ConfigMap) and the TLS files (the Secret).
CONFIG_DIR = "/etc/prfaas/config"
DEPLOYMENT_KEY = "deployment.yaml"
DEPLOYMENT_FILE = f"{CONFIG_DIR}/{DEPLOYMENT_KEY}"
TLS_DIR = "/etc/prfaas/tls"
#: A StatefulSet name longer than this makes pod labels longer than Kubernetes allows.
MAX_STATEFULSET_NAME = 52
ROUTER_PORT = 8000  # the router's port when the file leaves it at 0 (picked by `prfaas up`)

_ORDINAL = re.compile(r"^(?P<prefix>.+)-(?P<ordinal>0|[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class Group:
    """One StatefulSet: the instances of one cluster and one role, `<name>-0` onwards."""

    name: str
    cluster: str
    role: InstanceRole
    instances: tuple[str, ...]
    gpus: int  # nvidia.com/gpu per pod; 0: none


def router_port(deployment: Deployment) -> int:
    """The router's port in the pods: the file's, or ROUTER_PORT where `prfaas up` would
    have picked one."""
    return deployment.router.port or ROUTER_PORT


def host_name(instance: str, group: str, description: Description) -> str:
    """The instance's stable DNS name (its StatefulSet pod behind the headless Service)."""
    return f"{instance}.{group}.{description.namespace}.svc.{description.cluster_domain}"


def groups(deployment: Deployment, description: Description) -> tuple[Group, ...]:
    """Every StatefulSet of the deployment, in the file's order; a `DeploymentError`-ready
    list of problems when the instances cannot be StatefulSets is `group_problems`."""
    found, _ = _grouped(deployment, description)
    return found


def group_problems(deployment: Deployment, description: Description) -> list[str]:
    """Why the instances cannot be StatefulSets (empty: they can)."""
    return _grouped(deployment, description)[1]


def _grouped(
    deployment: Deployment, description: Description
) -> tuple[tuple[Group, ...], list[str]]:
    members: dict[tuple[str, InstanceRole], list[InstanceSpec]] = defaultdict(list)
    for spec in deployment.instances:
        members[(spec.cluster, spec.role)].append(spec)
    found: list[Group] = []
    problems: list[str] = []
    for (cluster, role), specs in members.items():
        where = f"instances ({cluster}, {role.value})"
        name, problem = _statefulset_name([s.name for s in specs])
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        gpus, problem = _gpus(deployment, description, cluster, specs)
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        names = tuple(f"{name}-{i}" for i in range(len(specs)))
        found.append(Group(name, cluster, role, names, gpus))
    seen = [g.name for g in found]
    problems += [f"StatefulSet {n!r} would hold two roles" for n in set(seen) if seen.count(n) > 1]
    return tuple(found), problems


def _statefulset_name(names: list[str]) -> tuple[str, str | None]:
    """The common prefix of `<prefix>-0` ... `<prefix>-(n-1)`, or why there is none."""
    matches = [_ORDINAL.match(n) for n in names]
    prefixes = {m.group("prefix") for m in matches if m is not None}
    ordinals = sorted(int(m.group("ordinal")) for m in matches if m is not None)
    shape = "named <prefix>-0 to <prefix>-N with one prefix (a StatefulSet's pods)"
    if None in matches or len(prefixes) != 1 or ordinals != list(range(len(names))):
        return "", f"{', '.join(names)} are not {shape}"
    [prefix] = prefixes
    if not re.match(DNS_LABEL, prefix) or len(prefix) > MAX_STATEFULSET_NAME:
        return "", f"{prefix!r} is not a StatefulSet name (lower case, digits, '-', <= 52)"
    return prefix, None


def _gpus(
    deployment: Deployment, description: Description, cluster: str, specs: list[InstanceSpec]
) -> tuple[int, str | None]:
    spec = description.clusters.get(cluster)
    if spec is None or spec.accelerator is Accelerator.NONE:
        return 0, None
    if deployment.backend is Backend.EMULATED:
        return 0, "emulated instances compute nothing: give their cluster accelerator: none"
    counts = {s.gpus_per_instance for s in specs}
    if len(counts) > 1:
        return 0, f"gpus_per_instance differs ({sorted(counts)}): one pod template per role"
    gpus = counts.pop()
    unsplit = [s.name for s in specs if s.backend is Backend.VLLM and s.parallelism is None]
    if unsplit and gpus > 1:
        # without `parallelism` vLLM runs its defaults (tp 1, dp 1): one GPU of the pod's
        return 0, (
            f"{', '.join(unsplit)}: a vllm instance of {gpus} GPUs needs parallelism "
            f"(e.g. {{tp: {gpus}}}), else vllm runs on one of them"
        )
    return gpus, None


def pod_deployment(
    deployment: Deployment, description: Description, found: tuple[Group, ...]
) -> dict[str, Any]:
    """The deployment file as every pod reads it (module docstring)."""
    raw = deployment.model_dump(mode="json")
    raw["secret"] = None
    router = raw["router"]
    router.update(host="0.0.0.0", admin_token=None, api_key=None)
    router["port"] = router_port(deployment)
    group_of = {name: g.name for g in found for name in g.instances}
    for instance in raw["instances"]:
        instance.update(
            host=host_name(instance["name"], group_of[instance["name"]], description),
            http_port=description.http_port,
            transfer_port=description.transfer_port,
        )
    raw["link"].update(rtt_ms=0, shaping="token-bucket", netns=None, shaping_reason=None)
    if raw["tls"] is not None:
        raw["tls"].update(
            cert_file=f"{TLS_DIR}/cert.pem",
            key_file=f"{TLS_DIR}/key.pem",
            ca_file=f"{TLS_DIR}/ca.pem",
        )
    return raw
