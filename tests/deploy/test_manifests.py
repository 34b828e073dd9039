"""The rendered manifests are valid Kubernetes objects (offline schemas), start the commands
`prfaas up` starts with arguments `prfaas` accepts, read only Secret and ConfigMap keys that
exist, and request GPUs where the instances compute."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from k8s_checks import (
    EXAMPLE,
    KUBERNETES_VERSIONS,
    Manifest,
    every_object,
    find,
    of_kind,
    pod_file,
    pod_templates,
    schema_errors,
    write_description,
    write_tls_files,
)

from prfaas.cli.app import app, main
from prfaas.deploy.render import Rendered, render, write
from prfaas.serve.config.deployment import CHILD_ENV, Deployment, load_deployment
from prfaas.serve.launch import preflight

TLS_DEPLOYMENT = """\
model: tiny-qwen3-next
tls: {{cert_file: {d}/cert.pem, key_file: {d}/key.pem, ca_file: {d}/ca.pem}}
router: {{api_key: a-client-api-key}}
instances:
  - {{name: prefill-0, role: prfaas-prefill, cluster: dc1}}
  - {{name: pdd-0, role: pd-decode, cluster: dc2}}
"""
TLS_DESCRIPTION = """\
deployment: deployment.yaml
router: {cluster: dc2, replicas: 1}
clusters:
  dc1: {image: img:cpu, addresses: {prefill-0: 10.0.0.1}}
  dc2: {image: img:cpu, addresses: {pdd-0: 10.0.1.1}}
"""


@pytest.fixture(scope="module")
def example() -> Rendered:
    return render(EXAMPLE)


@pytest.fixture
def with_tls(tmp_path: Path) -> Rendered:
    """A two-cluster deployment with TLS and an API key (self-signed files)."""
    write_tls_files(tmp_path)
    deployment = TLS_DEPLOYMENT.format(d=tmp_path)
    return render(write_description(tmp_path, deployment, TLS_DESCRIPTION))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_is_valid_kubernetes(version: str, example: Rendered) -> None:
    errors = [schema_errors(m, version) for _, m in every_object(example)]
    assert [e for e in errors if e is not None] == []
    kinds = {m["kind"] for _, m in every_object(example)}
    assert kinds == {
        "Namespace",
        "ConfigMap",
        "Secret",
        "Deployment",
        "StatefulSet",
        "Service",
        "PodDisruptionBudget",
        "EndpointSlice",
    }


def _statefulset(rendered: Rendered) -> Manifest:
    return copy.deepcopy(of_kind(rendered.manifests["pd"], "StatefulSet")[0])


def _set(path: tuple[Any, ...], value: object) -> Callable[[Manifest], None]:
    def mutate(manifest: Manifest) -> None:
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


CONTAINER = ("spec", "template", "spec", "containers", 0)
BROKEN = {
    "replicas as text": _set(("spec", "replicas"), "three"),
    "a misspelt field": _set((*CONTAINER, "readinessprobe"), {"tcpSocket": {"port": "http"}}),
    "a port out of range": _set((*CONTAINER, "ports", 0, "containerPort"), "eight thousand"),
    "containers as a map": _set(("spec", "template", "spec", "containers"), {"name": "x"}),
    "a probe with an unknown handler": _set((*CONTAINER, "livenessProbe"), {"tcp": {"port": 1}}),
}


@pytest.mark.parametrize("mutation", sorted(BROKEN))
def test_a_broken_manifest_fails_the_check(mutation: str, example: Rendered) -> None:
    """The check is not vacuous: one wrong field in a rendered StatefulSet is reported."""
    manifest = _statefulset(example)
    assert schema_errors(manifest, KUBERNETES_VERSIONS[-1]) is None
    BROKEN[mutation](manifest)
    assert schema_errors(manifest, KUBERNETES_VERSIONS[-1]) is not None


def _containers(rendered: Rendered) -> list[tuple[str, Manifest, Manifest]]:
    """(cluster, workload, container) for every container of every pod."""
    return [
        (cluster, workload, container)
        for cluster, objects in rendered.manifests.items()
        for workload in pod_templates(objects)
        for container in workload["spec"]["template"]["spec"]["containers"]
    ]


def _pod_names(workload: Manifest) -> list[str]:
    if workload["kind"] == "Deployment":
        return [workload["metadata"]["name"]]
    return [f"{workload['metadata']['name']}-{i}" for i in range(workload["spec"]["replicas"])]


def test_commands_are_ones_prfaas_accepts(example: Rendered, tmp_path: Path) -> None:
    """Each container runs `python -m prfaas router|instance FILE [--name POD]`, as the
    launcher does: the CLI's own parser takes the arguments, the mounted file loads as a
    deployment, and every pod's name is an instance of it whose ports are the pod's."""
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    seen = set()
    for cluster, workload, container in _containers(example):
        file_path = tmp_path / f"{cluster}.yaml"
        file_path.write_text(_mounted_text(example.manifests[cluster]))
        deployment = load_deployment(file_path)
        python, dash_m, package, verb, *args = container["command"]
        assert (python, dash_m, package) == ("python", "-m", "prfaas")
        for pod in _pod_names(workload):
            argv = [
                str(file_path) if a == "/etc/prfaas/config/deployment.yaml" else a for a in args
            ]
            argv = [pod if a == "$(POD_NAME)" else a for a in argv]
            context = commands[verb].make_context(verb, argv)
            assert context.params["deployment"] == file_path
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            if verb == "instance":
                spec = deployment.instance(context.params["name"])
                assert (spec.http_port, spec.transfer_port) == (ports["http"], ports["transfer"])
            else:
                assert deployment.router.port == ports["http"]
            seen.add(verb)
    assert seen == {"router", "instance"}


def test_each_pods_preflight_passes(
    example: Rendered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `prfaas router` and `prfaas instance` check before they start passes for every
    pod with the environment the pod gets. Only binding is left out: inside the pod the
    kubelet maps the pod's host name to its IP, which this machine does not have."""
    monkeypatch.setattr(preflight, "bind_failure", lambda host, port: None)
    monkeypatch.setenv(
        "PRFAAS_TRANSFER_SECRET", example.secrets["pd"]["stringData"]["transfer-secret"]
    )
    monkeypatch.setenv("PRFAAS_ADMIN_TOKEN", example.secrets["pd"]["stringData"]["admin-token"])
    for cluster, workload, _ in _containers(example):
        file_path = tmp_path / f"{cluster}.yaml"
        file_path.write_text(_mounted_text(example.manifests[cluster]))
        deployment = load_deployment(file_path)
        for pod in _pod_names(workload):
            is_router = workload["kind"] == "Deployment"
            scope = preflight.Scope.ROUTER if is_router else preflight.Scope.INSTANCE
            name = None if is_router else pod
            assert preflight.check_deployment(deployment, scope, instance_name=name) == []


def _mounted_text(objects: list[Manifest]) -> str:
    configmap = find(objects, "ConfigMap", "prfaas-deployment")
    assert configmap is not None
    text: str = configmap["data"]["deployment.yaml"]
    return text


def test_pods_have_the_launchers_environment(example: Rendered) -> None:
    for _, workload, container in _containers(example):
        env = {e["name"]: e for e in container["env"]}
        for name, value in CHILD_ENV.items():
            assert env[name]["value"] == value
        for name in ("PRFAAS_TRANSFER_SECRET", "PRFAAS_ADMIN_TOKEN"):
            assert "secretKeyRef" in env[name]["valueFrom"], (workload["metadata"]["name"], name)


def _reads(pod: Manifest) -> list[tuple[str, str, str]]:
    """(kind, object name, key) of every Secret or ConfigMap key the pod reads."""
    out = []
    for container in pod["containers"]:
        for env in container.get("env", []):
            for ref_kind, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                ref = env.get("valueFrom", {}).get(ref_kind)
                if ref is not None:
                    out.append((kind, ref["name"], ref["key"]))
    for volume in pod.get("volumes", []):
        for source, kind, name_field in (
            ("secret", "Secret", "secretName"),
            ("configMap", "ConfigMap", "name"),
        ):
            if source in volume:
                name = volume[source][name_field]
                out += [(kind, name, item["key"]) for item in volume[source]["items"]]
    return out


def _keys(rendered: Rendered, cluster: str, kind: str, name: str) -> set[str]:
    objects = [*rendered.manifests[cluster], rendered.secrets[cluster]]
    found = find(objects, kind, name)
    assert found is not None, f"{cluster}: no {kind} {name}"
    return set(found.get("data", {})) | set(found.get("stringData", {}))


@pytest.mark.parametrize("case", ["example", "with_tls"])
def test_every_key_a_pod_reads_exists(case: str, request: pytest.FixtureRequest) -> None:
    rendered: Rendered = request.getfixturevalue(case)
    reads = 0
    for cluster, objects in rendered.manifests.items():
        for workload in pod_templates(objects):
            for kind, name, key in _reads(workload["spec"]["template"]["spec"]):
                assert key in _keys(rendered, cluster, kind, name), (cluster, kind, name, key)
                reads += 1
    assert reads > 0


def test_tls_files_and_the_api_key_reach_the_pods(with_tls: Rendered, tmp_path: Path) -> None:
    """The certificate files travel in the Secret and the pods' file points at its mount; the
    API key reaches the router only; no credential is left in the ConfigMap."""
    secret = with_tls.secrets["dc2"]["stringData"]
    assert secret["tls-cert.pem"] == (tmp_path / "cert.pem").read_text()
    assert secret["api-key"] == "a-client-api-key"
    pods_file = pod_file(with_tls.manifests["dc2"])
    assert pods_file["tls"]["cert_file"] == "/etc/prfaas/tls/cert.pem"
    assert pods_file["router"]["api_key"] is None and pods_file["secret"] is None
    for _, workload, container in _containers(with_tls):
        names = {e["name"] for e in container["env"]}
        assert ("PRFAAS_API_KEY" in names) == (workload["kind"] == "Deployment")
    assert all(schema_errors(m, "1.37.0") is None for _, m in every_object(with_tls))


def test_both_clusters_share_one_secret_and_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", "s" * 32)
    monkeypatch.delenv("PRFAAS_ADMIN_TOKEN", raising=False)
    rendered = render(EXAMPLE)
    first, second = rendered.secrets.values()
    assert first == second and first["stringData"]["transfer-secret"] == "s" * 32
    assert pod_file(rendered.manifests["pd"]) == pod_file(rendered.manifests["prfaas"])
    write(rendered, tmp_path)
    assert (tmp_path / "pd" / "secret.yaml").stat().st_mode & 0o077 == 0


VLLM_DEPLOYMENT = """\
model: {model}
rebalance: {{enabled: false}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: vllm, gpus_per_instance: 8,
     parallelism: {{tp: 8}}}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: vllm, gpus_per_instance: 2,
     parallelism: {{tp: 1, dp: 2, ep: 2}}}}
  - {{name: pdd-1, role: pd-decode, cluster: pd, backend: vllm, gpus_per_instance: 2,
     parallelism: {{tp: 1, dp: 2, ep: 2}}}}
"""
GPU_DESCRIPTION = """\
deployment: deployment.yaml
router: {cluster: pd, replicas: 3}
model_volume: {claim: models, mount_path: /models}
clusters:
  prfaas: {image: img:cuda, accelerator: nvidia, addresses: {prfaas-0: 10.0.0.1}}
  pd: {image: img:cuda, accelerator: nvidia,
       addresses: {pdd-0: 10.0.1.1, pdd-1: 10.0.1.2}}
"""


def test_instances_request_their_gpus_and_the_router_none(tmp_path: Path) -> None:
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    deployment = VLLM_DEPLOYMENT.format(model=model)
    rendered = render(write_description(tmp_path, deployment, GPU_DESCRIPTION))
    gpus = {}
    for _, workload, container in _containers(rendered):
        limits = container.get("resources", {}).get("limits", {})
        gpus[workload["metadata"]["name"]] = limits.get("nvidia.com/gpu", 0)
    assert gpus == {"prfaas": 8, "pdd": 2, "prfaas-router": 0}
    router = find(rendered.manifests["pd"], "Deployment", "prfaas-router")
    assert router is not None and router["spec"]["replicas"] == 3
    assert all(schema_errors(m, "1.37.0") is None for _, m in every_object(rendered))
    assert isinstance(Deployment.model_validate(pod_file(rendered.manifests["pd"])), Deployment)


def test_render_writes_each_clusters_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`prfaas deploy render` writes what `kubectl apply -k out/<cluster>` applies: the
    kustomization names the two files, which hold the rendered objects."""
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "render", str(EXAMPLE), "--out", str(tmp_path)])
    assert exit_info.value.code == 0
    for cluster in ("pd", "prfaas"):
        directory = tmp_path / cluster
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert kustomization["resources"] == ["manifests.yaml", "secret.yaml"]
        documents = [
            doc
            for name in kustomization["resources"]
            for doc in yaml.safe_load_all((directory / name).read_text())
        ]
        assert {d["kind"] for d in documents} >= {"StatefulSet", "Secret", "ConfigMap"}
        assert all(schema_errors(d, KUBERNETES_VERSIONS[-1]) is None for d in documents)
    assert capsys.readouterr().out.split() == [
        str(tmp_path / c / f)
        for c in ("prfaas", "pd")
        for f in ("manifests.yaml", "secret.yaml", "kustomization.yaml")
    ]
