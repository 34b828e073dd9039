"""Every host name of the one deployment file holds in every cluster: a local StatefulSet
pod behind its headless Service, or another cluster's pod mirrored as a DNS name whose
address is that pod's LoadBalancer Service there (prfaas.deploy.wiring)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_checks import (
    EXAMPLE,
    KUBERNETES_VERSIONS,
    Manifest,
    every_object,
    find,
    of_kind,
    pod_file,
    schema_errors,
    write_description,
)

from prfaas.deploy.render import Rendered, render


def _assert_every_host_resolves(rendered: Rendered) -> None:
    clusters = rendered.manifests
    for cluster, objects in clusters.items():
        for instance in pod_file(objects)["instances"]:
            pod, group, namespace, svc, *_ = instance["host"].split(".")
            assert (pod, namespace, svc) == (instance["name"], "prfaas", "svc")
            service = find(objects, "Service", group)
            assert service is not None and service["spec"]["clusterIP"] == "None"
            if instance["cluster"] == cluster:
                statefulset = find(objects, "StatefulSet", group)
                assert statefulset is not None and statefulset["spec"]["serviceName"] == group
                assert int(pod.rsplit("-", 1)[1]) < statefulset["spec"]["replicas"]
                continue
            address = _mirrored_address(objects, group, pod)
            _assert_exposed(clusters[instance["cluster"]], pod, address, instance)


def _mirrored_address(objects: list[Manifest], service: str, pod: str) -> str:
    slices = [
        s
        for s in of_kind(objects, "EndpointSlice")
        if s["metadata"]["labels"]["kubernetes.io/service-name"] == service
    ]
    [address] = [e["addresses"][0] for s in slices for e in s["endpoints"] if e["hostname"] == pod]
    return str(address)


def _assert_exposed(home: list[Manifest], pod: str, address: str, instance: Manifest) -> None:
    wan = find(home, "Service", f"{pod}-wan")
    assert wan is not None
    spec = wan["spec"]
    assert (spec["type"], spec["loadBalancerIP"]) == ("LoadBalancer", address)
    assert spec["selector"] == {"statefulset.kubernetes.io/pod-name": pod}
    ports = {(p["port"], p["targetPort"]) for p in spec["ports"]}
    for port in (instance["http_port"], instance["transfer_port"]):
        assert (port, port) in ports


def test_the_example_resolves_in_both_clusters() -> None:
    rendered = render(EXAMPLE)
    assert set(rendered.manifests) == {"prfaas", "pd"}
    _assert_every_host_resolves(rendered)
    # the router runs in the PD cluster only
    assert find(rendered.manifests["prfaas"], "Deployment", "prfaas-router") is None


@settings(max_examples=30)
@given(
    prfaas=st.integers(1, 4),
    pd_prefill=st.integers(0, 3),
    pd_decode=st.integers(1, 4),
    router_in_prfaas=st.booleans(),
)
def test_any_layout_renders_valid_objects_that_resolve_in_both_clusters(
    tmp_path_factory: pytest.TempPathFactory,
    prfaas: int,
    pd_prefill: int,
    pd_decode: int,
    router_in_prfaas: bool,
) -> None:
    directory = tmp_path_factory.mktemp("layout")
    layout = {"pf": ("prfaas-prefill", "prfaas", prfaas)}
    layout["pp"] = ("pd-prefill", "pd", pd_prefill)
    layout["pdd"] = ("pd-decode", "pd", pd_decode)
    lines: list[str] = []
    addresses: dict[str, list[str]] = {"prfaas": [], "pd": []}
    for prefix, (role, cluster, count) in layout.items():
        for i in range(count):
            lines.append(f"  - {{name: {prefix}-{i}, role: {role}, cluster: {cluster}}}")
            third = 0 if cluster == "prfaas" else 1
            addresses[cluster].append(f"{prefix}-{i}: 10.{third}.{len(lines)}.1")
    deployment = "model: tiny-qwen3-next\ninstances:\n" + "\n".join(lines) + "\n"
    router = "prfaas" if router_in_prfaas else "pd"
    description = (
        f"deployment: deployment.yaml\nrouter: {{cluster: {router}}}\nclusters:\n"
        + "".join(
            f"  {c}: {{image: img, addresses: {{{', '.join(a)}}}}}\n" for c, a in addresses.items()
        )
    )
    rendered = render(write_description(directory, deployment, description))
    _assert_every_host_resolves(rendered)
    names = [(c, m["kind"], m["metadata"]["name"]) for c, m in every_object(rendered)]
    assert len(names) == len(set(names))  # nothing rendered twice in a cluster
    errors = [schema_errors(m, KUBERNETES_VERSIONS[-1]) for _, m in every_object(rendered)]
    assert [e for e in errors if e is not None] == []
