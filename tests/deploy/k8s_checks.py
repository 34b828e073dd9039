"""What the deploy tests check on rendered manifests: the Kubernetes schemas (offline, from
kubernetes-validate), and small readers of the objects (pods, containers, lookups)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from prfaas.deploy.render import Rendered

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "k8s" / "case-study.yaml"
#: The oldest and newest Kubernetes the manifests are checked against (strict schemas: an
#: unknown field is an error, as `kubectl apply --validate=strict` makes it).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")

Manifest = dict[str, Any]


def schema_errors(manifest: Manifest, version: str) -> str | None:
    """Why `manifest` is not a valid object of Kubernetes `version`, or None."""
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{manifest['kind']} {manifest['metadata'].get('name')}: {err.message}"
    return None


def every_object(rendered: Rendered) -> Iterator[tuple[str, Manifest]]:
    """(cluster, object) for every object a cluster gets, its Secret included."""
    for cluster, objects in rendered.manifests.items():
        for manifest in objects:
            yield cluster, manifest
        yield cluster, rendered.secrets[cluster]


def find(objects: list[Manifest], kind: str, name: str) -> Manifest | None:
    for manifest in objects:
        if manifest["kind"] == kind and manifest["metadata"]["name"] == name:
            return manifest
    return None


def of_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [m for m in objects if m["kind"] == kind]


def pod_templates(objects: list[Manifest]) -> Iterator[Manifest]:
    for manifest in objects:
        if manifest["kind"] in ("Deployment", "StatefulSet"):
            yield manifest


def pod_file(objects: list[Manifest]) -> dict[str, Any]:
    """The deployment file the cluster's pods read (the ConfigMap's)."""
    configmap = find(objects, "ConfigMap", "prfaas-deployment")
    assert configmap is not None
    loaded: dict[str, Any] = yaml.safe_load(configmap["data"]["deployment.yaml"])
    return loaded


def write_description(
    directory: Path, deployment: str, description: str, name: str = "description.yaml"
) -> Path:
    """A deployment file and a description naming it, in `directory`."""
    (directory / "deployment.yaml").write_text(deployment)
    path = directory / name
    path.write_text(description)
    return path


def write_tls_files(where: Path) -> None:
    """cert.pem, key.pem (self-signed for prfaas-transfer) and ca.pem (the same certificate)
    in `where`; skips without openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem"),
         "-subj", "/CN=prfaas-transfer", "-addext", "subjectAltName=DNS:prfaas-transfer"],
        check=True, capture_output=True,
    )  # fmt: skip
    shutil.copy(where / "cert.pem", where / "ca.pem")
