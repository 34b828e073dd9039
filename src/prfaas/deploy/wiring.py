"""What joins the pods: the two clusters to each other, the ConfigMaps and the Secret.

Across clusters (two or more in the deployment), every instance is dialled from the other
cluster: PrfaaS prefill instances send KV to PD instances' `transfer_port` (a pd-prefill may
be flipped to decode), PD instances move cached prefixes to PrfaaS instances' `transfer_port`,
and the router calls every instance's `http_port`. So each instance gets, in its own cluster,
a LoadBalancer Service on its pod (`<instance>-wan`, at the address the description gives,
ports unchanged), and in every other cluster a mirror: a headless Service of its StatefulSet's
name, without selector, whose EndpointSlice names the pod (`hostname`) at that address. The
cluster DNS then answers `pdd-1.pdd.<ns>.svc.<domain>` in the other cluster with the address
of the pod's LoadBalancer, so the one deployment file's host names hold in both clusters
(layout.py). This needs the same namespace and cluster domain in both clusters, and a network
between them that carries the addresses (a private interconnect, VPN or internal LBs).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from prfaas.deploy import credentials as creds
from prfaas.deploy.description import Description
from prfaas.deploy.layout import DEPLOYMENT_KEY, Group
from prfaas.deploy.workloads import (
    DEPLOYMENT_CONFIGMAP,
    Manifest,
    instance_ports,
    labels,
    metadata,
)

GRAFANA_CONFIGMAP = "prfaas-grafana-dashboard"
GRAFANA_KEY = "prfaas-router.json"
WAN_SUFFIX = "-wan"
MANAGED_BY = "prfaas.io/render"


def cross_cluster_problems(found: tuple[Group, ...], description: Description) -> list[str]:
    """Every instance needs an address when there is more than one cluster; an address names
    an instance of its own cluster, and no two instances share one."""
    problems: list[str] = []
    clusters = {g.cluster for g in found}
    named = {(g.cluster, name) for g in found for name in g.instances}
    for cluster, spec in description.clusters.items():
        for name in spec.addresses:
            if (cluster, name) not in named:
                problems.append(f"clusters.{cluster}.addresses.{name}: no such instance there")
    if len(clusters) < 2:
        return problems
    for cluster, name in sorted(named):
        if name not in description.clusters[cluster].addresses:
            problems.append(
                f"clusters.{cluster}.addresses.{name}: missing (the other cluster dials it)"
            )
    seen: dict[str, str] = {}
    for spec in description.clusters.values():
        for name, address in spec.addresses.items():
            if address in seen:
                problems.append(f"address {address} is given to {seen[address]} and {name}")
            seen[address] = name
    return problems


def exposed_instances(
    found: tuple[Group, ...], description: Description, cluster: str
) -> list[Manifest]:
    """The LoadBalancer Service of each of this cluster's instances (several clusters only)."""
    if len({g.cluster for g in found}) < 2:
        return []
    spec = description.clusters[cluster]
    out: list[Manifest] = []
    for group in (g for g in found if g.cluster == cluster):
        for name in group.instances:
            wan_labels = labels("instance-wan", **{"prfaas.io/statefulset": group.name})
            meta = metadata(name + WAN_SUFFIX, description, wan_labels)
            if spec.service_annotations:
                meta["annotations"] = dict(spec.service_annotations)
            ports = [{**p, "targetPort": p["port"]} for p in instance_ports(description)]
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": meta,
                    "spec": {
                        "type": "LoadBalancer",
                        "loadBalancerIP": spec.addresses[name],
                        "selector": {"statefulset.kubernetes.io/pod-name": name},
                        "ports": ports,
                    },
                }
            )
    return out


def remote_instances(
    found: tuple[Group, ...], description: Description, cluster: str
) -> list[Manifest]:
    """The other clusters' StatefulSets as names in this one (module docstring)."""
    out: list[Manifest] = []
    for group in (g for g in found if g.cluster != cluster):
        addresses = description.clusters[group.cluster].addresses
        group_labels = labels("instance-remote", **{"prfaas.io/cluster": group.cluster})
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(group.name, description, group_labels),
            "spec": {"clusterIP": "None", "ports": instance_ports(description)},
        }
        slice_labels = {
            **group_labels,
            "kubernetes.io/service-name": group.name,
            "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
        }
        endpoints = [
            {"addresses": [addresses[name]], "hostname": name, "conditions": {"ready": True}}
            for name in group.instances
        ]
        endpoint_slice = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": metadata(f"{group.name}-remote", description, slice_labels),
            "addressType": "IPv4",
            "endpoints": endpoints,
            "ports": instance_ports(description),
        }
        out += [service, endpoint_slice]
    return out


def namespace(description: Description) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": description.namespace, "labels": labels("namespace")},
    }


def deployment_configmap(pod_file: dict[str, Any], description: Description) -> Manifest:
    """The deployment file the pods read (layout.pod_deployment), identical in every cluster."""
    text = yaml.safe_dump(pod_file, sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(DEPLOYMENT_CONFIGMAP, description, labels("config")),
        "data": {DEPLOYMENT_KEY: text},
    }


def grafana_configmap(dashboard_json: str, description: Description) -> Manifest:
    """The router's Grafana dashboard, labelled for the Grafana sidecar that loads
    dashboards from ConfigMaps (`grafana_dashboard: "1"`, kube-prometheus-stack's default)."""
    json.loads(dashboard_json)  # a broken file fails the render, not Grafana later
    dashboard_labels = {**labels("grafana"), "grafana_dashboard": "1"}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(GRAFANA_CONFIGMAP, description, dashboard_labels),
        "data": {GRAFANA_KEY: dashboard_json},
    }


def secret(data: dict[str, str], description: Description) -> Manifest:
    """The shared Secret (credentials.py); `stringData`, so the rendered file reads plainly:
    it is written apart from the other manifests and is never to be committed."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(creds.SECRET_NAME, description, labels("credentials")),
        "type": "Opaque",
        "stringData": data,
    }
