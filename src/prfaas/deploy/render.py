"""Render a description into one directory of manifests per cluster (`prfaas deploy render`).

    render(description.yaml)   every check first (each problem one line of a
                               `DeploymentError`), then per cluster: Namespace, the
                               deployment ConfigMap, the router (its cluster only, with the
                               Grafana dashboard), its StatefulSets, what crosses clusters
                               (wiring.py), and the shared Secret kept apart
    write(rendered, out)       out/<cluster>/manifests.yaml, secret.yaml, kustomization.yaml
                               (`kubectl apply -k out/<cluster>`, or a kustomize base for
                               a site's overlays)

Rendering reads only files: nothing contacts a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from prfaas.deploy import layout, wiring, workloads
from prfaas.deploy.credentials import API_KEY_KEY, credentials
from prfaas.deploy.description import Description, beside, load_description
from prfaas.deploy.workloads import Manifest
from prfaas.serve.config.deployment import Deployment, load_deployment
from prfaas.serve.errors import DeploymentError


class _Dumper(yaml.SafeDumper):
    """Plain manifests: no anchors for shared label dicts, multi-line strings (the deployment
    file, PEM files, the dashboard) as literal blocks that read as the files they are."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump(objects: list[Manifest]) -> str:
    """The objects as one multi-document YAML text."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False)


MANIFESTS_FILE = "manifests.yaml"
SECRET_FILE = "secret.yaml"
KUSTOMIZATION = {
    "apiVersion": "kustomize.config.k8s.io/v1beta1",
    "kind": "Kustomization",
    "resources": [MANIFESTS_FILE, SECRET_FILE],
}


@dataclass(frozen=True, slots=True)
class Rendered:
    """Per cluster: its manifests, and its copy of the shared Secret (written apart)."""

    manifests: dict[str, list[Manifest]]
    secrets: dict[str, Manifest]


def render(description_path: Path) -> Rendered:
    """Every cluster's manifests from the description at `description_path`."""
    description = load_description(description_path)
    deployment = load_deployment(beside(description_path, description.deployment))
    problems = [
        *placement_problems(deployment, description),
        *layout.group_problems(deployment, description),
    ]
    if problems:
        raise DeploymentError(*problems)
    found = layout.groups(deployment, description)
    problems = wiring.cross_cluster_problems(found, description)
    if problems:
        raise DeploymentError(*problems)
    data = credentials(deployment)
    shared = [
        wiring.namespace(description),
        wiring.deployment_configmap(
            layout.pod_deployment(deployment, description, found), description
        ),
    ]
    router = workloads.router_objects(deployment, description, has_api_key=API_KEY_KEY in data)
    if description.grafana_dashboard is not None:
        dashboard = _read(beside(description_path, description.grafana_dashboard))
        router.append(wiring.grafana_configmap(dashboard, description))
    manifests: dict[str, list[Manifest]] = {}
    for cluster in description.clusters:
        objects = list(shared)
        if cluster == description.router.cluster:
            objects += router
        for group in (g for g in found if g.cluster == cluster):
            objects += workloads.instance_objects(deployment, description, group)
        objects += wiring.exposed_instances(found, description, cluster)
        objects += wiring.remote_instances(found, description, cluster)
        manifests[cluster] = objects
    secret = wiring.secret(data, description)
    clashes = [p for c, objects in manifests.items() for p in _clashes(c, [*objects, secret])]
    if clashes:
        raise DeploymentError(*clashes)
    return Rendered(manifests, {cluster: secret for cluster in description.clusters})


def _clashes(cluster: str, objects: list[Manifest]) -> list[str]:
    """Objects of one kind and name twice in a cluster (an instance prefix that is also the
    name of another object, such as `prfaas-router`): the second would replace the first."""
    seen: set[tuple[str, str]] = set()
    problems: list[str] = []
    for manifest in objects:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in seen:
            problems.append(
                f"clusters.{cluster}: two {key[0]} objects named {key[1]!r} (rename the "
                "instances whose names make it)"
            )
        seen.add(key)
    return problems


def placement_problems(deployment: Deployment, description: Description) -> list[str]:
    """The description's clusters are the deployment's; no two of the router's and an
    instance's ports are one; the router runs in one of the clusters (any number of
    replicas: one at a time holds the slow loop's lease, `serve.router.lease`)."""
    problems: list[str] = []
    wanted = {spec.cluster for spec in deployment.instances}
    described = set(description.clusters)
    problems += [f"clusters: no entry for cluster {c!r}" for c in sorted(wanted - described)]
    problems += [
        f"clusters.{c}: no instance of the deployment is there" for c in sorted(described - wanted)
    ]
    ports = [
        ("router.port", layout.router_port(deployment)),
        ("http_port", description.http_port),
        ("transfer_port", description.transfer_port),
    ]
    for i, (field, port) in enumerate(ports):
        problems += [
            f"{field}: port {port} is also {other} (preflight refuses it: the router listens on "
            "0.0.0.0 and sees every instance's ports)"
            for other, other_port in ports[:i]
            if other_port == port
        ]
    if description.router.cluster not in described:
        problems.append(f"router.cluster: {description.router.cluster!r} is not in clusters")
    return problems


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise DeploymentError(f"cannot read {path}: {err.strerror}") from None


def write(rendered: Rendered, out_dir: Path) -> list[Path]:
    """The files of every cluster under `out_dir/<cluster>/`; returns the paths written."""
    written: list[Path] = []
    for cluster, objects in rendered.manifests.items():
        directory = out_dir / cluster
        directory.mkdir(parents=True, exist_ok=True)
        files = {
            MANIFESTS_FILE: dump(objects),
            SECRET_FILE: dump([rendered.secrets[cluster]]),
            "kustomization.yaml": dump([KUSTOMIZATION]),
        }
        for name, text in files.items():
            path = directory / name
            path.write_text(text)
            written.append(path)
        (directory / SECRET_FILE).chmod(0o600)
    return written
