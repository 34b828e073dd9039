"""A description that cannot become manifests is refused with one line per problem naming the
field (exit 2), and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_checks import find, pod_file, write_description

from prfaas.cli.app import main
from prfaas.deploy.render import render
from prfaas.serve.config.deployment import Deployment

DEPLOYMENT = """\
model: tiny-qwen3-next
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas}
  - {name: decode-a, role: pd-decode, cluster: pd}
  - {name: decode-b, role: pd-decode, cluster: pd}
"""
DESCRIPTION = """\
deployment: deployment.yaml
router: {cluster: pd, replicas: 2}
clusters:
  prfaas: {image: img, addresses: {prfaas-0: 10.0.0.1}}
  pd: {image: img}
  spare: {image: img}
"""


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_every_problem_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_description(tmp_path, DEPLOYMENT, DESCRIPTION)
    code, err = _run(["deploy", "render", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert err.splitlines() == [
        "prfaas: error: clusters.spare: no instance of the deployment is there",
        "prfaas: error: instances (pd, pd-decode): decode-a, decode-b are not named <prefix>-0 "
        "to <prefix>-N with one prefix (a StatefulSet's pods)",
    ]
    assert not (tmp_path / "out").exists()


def test_a_second_cluster_needs_every_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = DEPLOYMENT.replace("decode-a", "pdd-0").replace("decode-b", "pdd-1")
    description = DESCRIPTION.replace("replicas: 2", "replicas: 1").replace(
        "  spare: {image: img}\n", ""
    )
    path = write_description(tmp_path, deployment, description)
    code, err = _run(["deploy", "render", str(path)], capsys)
    assert code == 2
    assert err.splitlines() == [
        "prfaas: error: clusters.pd.addresses.pdd-0: missing (the other cluster dials it)",
        "prfaas: error: clusters.pd.addresses.pdd-1: missing (the other cluster dials it)",
    ]


def test_emulated_instances_get_no_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = (
        "model: prfaas-1t\ninstances:\n"
        "  - {name: p-0, role: pd-prefill, cluster: pd, backend: emulated, chip: h20}\n"
        "  - {name: d-0, role: pd-decode, cluster: pd, backend: emulated, chip: h20}\n"
    )
    description = (
        "deployment: deployment.yaml\nrouter: {cluster: pd}\n"
        "clusters: {pd: {image: img, accelerator: nvidia, addresses: {d-0: 300.1.1.1}}}\n"
    )
    code, err = _run(
        ["deploy", "render", str(write_description(tmp_path, deployment, description))], capsys
    )
    assert code == 2
    assert "clusters.pd.addresses: Value error, d-0: '300.1.1.1' is not an IPv4 address" in err
    fixed = description.replace("300.1.1.1", "10.0.0.1")
    code, err = _run(
        ["deploy", "render", str(write_description(tmp_path, deployment, fixed))], capsys
    )
    assert code == 2
    assert err.splitlines() == [
        "prfaas: error: instances (pd, pd-prefill): emulated instances compute nothing: give "
        "their cluster accelerator: none",
        "prfaas: error: instances (pd, pd-decode): emulated instances compute nothing: give "
        "their cluster accelerator: none",
    ]


def test_ports_that_preflight_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = DEPLOYMENT.replace("decode-a", "pdd-0").replace("decode-b", "pdd-1")
    description = (
        "deployment: deployment.yaml\nhttp_port: 8000\ntransfer_port: 8000\n"
        "router: {cluster: pd}\nclusters: {prfaas: {image: img}, pd: {image: img}}\n"
    )
    code, err = _run(
        ["deploy", "render", str(write_description(tmp_path, deployment, description))], capsys
    )
    assert code == 2
    lines = err.splitlines()
    assert lines[:2] == [
        "prfaas: error: http_port: port 8000 is also router.port (preflight refuses it: the "
        "router listens on 0.0.0.0 and sees every instance's ports)",
        "prfaas: error: transfer_port: port 8000 is also router.port (preflight refuses it: "
        "the router listens on 0.0.0.0 and sees every instance's ports)",
    ]


def test_instance_names_that_clash_with_the_routers_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = (
        "model: tiny-qwen3-next\ninstances:\n"
        "  - {name: prfaas-router-0, role: pd-prefill, cluster: pd}\n"
        "  - {name: pdd-0, role: pd-decode, cluster: pd}\n"
    )
    description = "deployment: deployment.yaml\nrouter: {cluster: pd}\nclusters: {pd: {image: i}}\n"
    path = write_description(tmp_path, deployment, description)
    code, err = _run(["deploy", "render", str(path)], capsys)
    assert code == 2
    assert err.splitlines() == [
        f"prfaas: error: clusters.pd: two {kind} objects named 'prfaas-router' (rename the "
        "instances whose names make it)"
        for kind in ("Service", "PodDisruptionBudget")
    ]


def test_router_replicas_render_with_the_slow_loop_on(tmp_path: Path) -> None:
    """Replicas share the slow loop through its lease (`serve.router.lease`), so three of
    them render with `rebalance` left on (its default)."""
    deployment = DEPLOYMENT.replace("decode-a", "pdd-0").replace("decode-b", "pdd-1")
    description = DESCRIPTION.replace("replicas: 2", "replicas: 3").replace(
        "  pd: {image: img}\n  spare: {image: img}\n",
        "  pd: {image: img, addresses: {pdd-0: 10.0.1.1, pdd-1: 10.0.1.2}}\n",
    )
    rendered = render(write_description(tmp_path, deployment, description))
    assert Deployment.model_validate(pod_file(rendered.manifests["pd"])).rebalance.enabled
    router = find(rendered.manifests["pd"], "Deployment", "prfaas-router")
    assert router is not None and router["spec"]["replicas"] == 3
