"""The pods: the router Deployment and one StatefulSet per (cluster, role), with their
Services and PodDisruptionBudgets.

Each container runs what `prfaas up` runs for that process (`serve.launch.launcher`):

    router     python -m prfaas router   /etc/prfaas/config/deployment.yaml
    instance   python -m prfaas instance /etc/prfaas/config/deployment.yaml --name $(POD_NAME)

with `serve.config.deployment.CHILD_ENV` and the Secret's transfer secret and admin token in the
environment. Probes (docs/deploy.md, "Health"):

- router: ready while `/health` answers 200 (`ok` or `degraded`: a prefill and a decode
  instance serve; 503 when requests cannot be served); alive while `/metrics` answers (it
  always does while the event loop runs: a router whose instances are down is not restarted,
  which would not bring them back);
- instance: an instance opens its `http_port` only once its model is loaded, so the startup
  probe (allowed the deployment's start timeout) checks that it listens; readiness and
  liveness then ask `GET /health`, the one call of its control API that is not signed (the
  kubelet cannot sign): an instance whose event loop is stuck answers no HTTP, though its
  socket still accepts.
"""

from __future__ import annotations

import math
from typing import Any

from prfaas.deploy import credentials as creds
from prfaas.deploy.description import Description
from prfaas.deploy.layout import (
    CONFIG_DIR,
    DEPLOYMENT_FILE,
    DEPLOYMENT_KEY,
    TLS_DIR,
    Group,
    router_port,
)
from prfaas.serve.config.deployment import CHILD_ENV, Backend, Deployment

Manifest = dict[str, Any]
APP = "prfaas"
ROUTER = "prfaas-router"
DEPLOYMENT_CONFIGMAP = "prfaas-deployment"
STARTUP_PERIOD_S = 10


def labels(component: str, **more: str) -> dict[str, str]:
    """The labels every object of a component carries (and its pods' selector)."""
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component, **more}


def metadata(name: str, description: Description, object_labels: dict[str, str]) -> Manifest:
    """An object's name, namespace and labels."""
    return {"name": name, "namespace": description.namespace, "labels": object_labels}


def _env(*, router: bool, has_api_key: bool) -> list[Manifest]:
    env: list[Manifest] = [{"name": k, "value": v} for k, v in CHILD_ENV.items()]
    from_secret = dict(creds.SHARED_ENV)
    if router and has_api_key:
        from_secret.update(creds.ROUTER_ONLY_ENV)
    for variable, key in from_secret.items():
        ref = {"name": creds.SECRET_NAME, "key": key}
        env.append({"name": variable, "valueFrom": {"secretKeyRef": ref}})
    return env


def _volumes(deployment: Deployment, description: Description) -> tuple[list[Manifest], ...]:
    """(volumes, mounts) of every prfaas pod: the deployment file, and the TLS files."""
    config_items = [{"key": DEPLOYMENT_KEY, "path": DEPLOYMENT_KEY}]
    volumes: list[Manifest] = [
        {"name": "config", "configMap": {"name": DEPLOYMENT_CONFIGMAP, "items": config_items}}
    ]
    mounts: list[Manifest] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    if deployment.tls is not None:
        items = [{"key": key, "path": path} for key, path in creds.TLS_FILES.items()]
        secret = {"secretName": creds.SECRET_NAME, "items": items, "defaultMode": 0o400}
        volumes.append({"name": "tls", "secret": secret})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    return volumes, mounts


def router_objects(
    deployment: Deployment, description: Description, has_api_key: bool
) -> list[Manifest]:
    """The router's Deployment, its Service and its PodDisruptionBudget."""
    port = router_port(deployment)
    selector = labels("router")
    volumes, mounts = _volumes(deployment, description)
    scrape = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    container = {
        "name": "router",
        "image": description.clusters[description.router.cluster].image,
        "command": ["python", "-m", "prfaas", "router", DEPLOYMENT_FILE],
        "env": _env(router=True, has_api_key=has_api_key),
        "ports": [{"name": "http", "containerPort": port}],
        "readinessProbe": _http_probe("/health", period_s=5, failures=2),
        "livenessProbe": _http_probe("/metrics", period_s=10, failures=3),
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": mounts,
    }
    pod = {
        "metadata": {"labels": selector, "annotations": scrape},
        "spec": {"containers": [container], "volumes": volumes},
    }
    workload = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(ROUTER, description, selector),
        "spec": {
            "replicas": description.router.replicas,
            "selector": {"matchLabels": selector},
            "template": pod,
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**metadata(ROUTER, description, selector), "annotations": scrape},
        "spec": {
            "type": description.router.service_type.value,
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": "http"}],
        },
    }
    return [workload, service, _budget(ROUTER, description, selector)]


def _http_probe(path: str, *, period_s: int, failures: int) -> Manifest:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period_s,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def _socket_probe(*, period_s: int, failures: int) -> Manifest:
    return {"tcpSocket": {"port": "http"}, "periodSeconds": period_s, "failureThreshold": failures}


def instance_objects(
    deployment: Deployment, description: Description, group: Group
) -> list[Manifest]:
    """One role's StatefulSet, its headless Service (the pods' stable names) and budget."""
    selector = labels("instance", **{"prfaas.io/statefulset": group.name})
    pod_labels = {
        **selector,
        "prfaas.io/role": group.role.value,
        "prfaas.io/cluster": group.cluster,
    }
    workload = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(group.name, description, pod_labels),
        "spec": {
            "serviceName": group.name,
            "replicas": len(group.instances),
            "podManagementPolicy": "Parallel",  # instances start independently of each other
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": _instance_pod(deployment, description, group),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(group.name, description, pod_labels),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # the router finds an instance as it starts
            "selector": selector,
            "ports": instance_ports(description),
        },
    }
    return [workload, service, _budget(group.name, description, selector)]


def instance_ports(description: Description) -> list[Manifest]:
    """The two ports of every instance (Services and EndpointSlices list them alike)."""
    return [
        {"name": "http", "port": description.http_port, "protocol": "TCP"},
        {"name": "transfer", "port": description.transfer_port, "protocol": "TCP"},
    ]


def _instance_pod(deployment: Deployment, description: Description, group: Group) -> Manifest:
    volumes, mounts = _volumes(deployment, description)
    model = description.model_volume
    if model is not None:
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": model.claim, "readOnly": True}}
        )
        mounts.append({"name": "model", "mountPath": model.mount_path, "readOnly": True})
    name_ref = {"fieldRef": {"fieldPath": "metadata.name"}}
    container: Manifest = {
        "name": "instance",
        "image": description.clusters[group.cluster].image,
        "command": ["python", "-m", "prfaas", "instance", DEPLOYMENT_FILE, "--name", "$(POD_NAME)"],
        "env": [
            {"name": "POD_NAME", "valueFrom": name_ref},
            *_env(router=False, has_api_key=False),
        ],
        "ports": [
            {"name": "http", "containerPort": description.http_port},
            {"name": "transfer", "containerPort": description.transfer_port},
        ],
        "startupProbe": _socket_probe(
            period_s=STARTUP_PERIOD_S,
            failures=math.ceil(_start_timeout_s(deployment) / STARTUP_PERIOD_S),
        ),
        "readinessProbe": _http_probe("/health", period_s=5, failures=2),
        "livenessProbe": _http_probe("/health", period_s=10, failures=3),
        "volumeMounts": mounts,
    }
    if group.gpus:
        gpus = {"nvidia.com/gpu": group.gpus}
        container["resources"] = {"requests": gpus, "limits": gpus}
    return {"containers": [container], "volumes": volumes}


def _start_timeout_s(deployment: Deployment) -> float:
    """How long an instance may take to listen: what `prfaas up` waits for (`Launcher`)."""
    if deployment.backend is Backend.VLLM:
        return deployment.vllm.start_timeout_s
    return deployment.supervisor.start_timeout_s


def _budget(name: str, description: Description, selector: dict[str, str]) -> Manifest:
    """At most one pod of the set evicted at a time (node drains, upgrades)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, description, selector),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }
