"""Rendered instances run their split (issue 30): `prfaas deploy render` gives each instance pod
tp x dp GPUs, and the `vllm serve` each pod's instance process starts (`prfaas deploy pods`
scripts run the same command lines) carries the flags that run the instance's `parallelism`.
A vllm instance of several GPUs with no split is refused: vLLM would use one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from k8s_checks import write_description

from prfaas.deploy.pod_scripts import DEPLOYMENT_FILE, write_pod_scripts
from prfaas.deploy.render import render, write
from prfaas.serve.backends.vllm.child import ChildPorts, serve_command
from prfaas.serve.config.deployment import load_deployment
from prfaas.serve.errors import DeploymentError

DEPLOYMENT = """\
model: {model}
rebalance: {{enabled: false}}
instances:
  - {{name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: vllm, gpus_per_instance: 8,
     parallelism: {{tp: 1, dp: 8, ep: 8}}}}
  - {{name: pdd-0, role: pd-decode, cluster: pd, backend: vllm, gpus_per_instance: 4,
     parallelism: {{tp: 2, dp: 2}}}}
"""
DESCRIPTION = """\
deployment: deployment.yaml
router: {cluster: pd, replicas: 1}
model_volume: {claim: models, mount_path: /models}
clusters:
  prfaas: {image: img:cuda, accelerator: nvidia, addresses: {prfaas-0: 10.0.0.1}}
  pd: {image: img:cuda, accelerator: nvidia, addresses: {pdd-0: 10.0.1.1}}
"""
EXPECTED_FLAGS = {
    "prfaas-0": [
        "--tensor-parallel-size", "1", "--data-parallel-size", "8", "--enable-expert-parallel",
    ],
    "pdd-0": ["--tensor-parallel-size", "2", "--data-parallel-size", "2"],
}  # fmt: skip


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    return model


def _engine_flags(argv: list[str]) -> list[str]:
    """The split's flags of a `vllm serve` command line, in order."""
    split_flags = {"--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel"}
    found: list[str] = []
    for i, arg in enumerate(argv):
        if arg in split_flags:
            found.append(arg)
            if arg != "--enable-expert-parallel":
                found.append(argv[i + 1])
    return found


def test_pods_get_tp_x_dp_gpus_and_their_engines_run_the_split(tmp_path: Path) -> None:
    model = _model_dir(tmp_path)
    rendered = render(write_description(tmp_path, DEPLOYMENT.format(model=model), DESCRIPTION))
    out, scripts = tmp_path / "out", tmp_path / "pods"
    write(rendered, out)
    pods = write_pod_scripts(out, scripts, "python")
    deployment = load_deployment(scripts / DEPLOYMENT_FILE)  # what every pod reads
    instances = [p.pod for p in pods if p.pod.container == "instance"]
    assert sorted(p.pod for p in instances) == ["pdd-0", "prfaas-0"]
    gpus = {}
    for cluster, objects in rendered.manifests.items():
        for workload in objects:
            if workload["kind"] == "StatefulSet":
                [container] = workload["spec"]["template"]["spec"]["containers"]
                gpus[cluster] = container["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == {"prfaas": 8, "pd": 4}  # tp x dp of each instance
    for pod in instances:
        name = pod.argv[pod.argv.index("--name") + 1]
        spec = deployment.instance(name)
        ports = ChildPorts(http_port=1, events_port=2, status_path=tmp_path / "status.json")
        argv = serve_command(Path("python"), model, deployment, spec, ports)
        assert _engine_flags(argv) == EXPECTED_FLAGS[name]


def test_a_vllm_instance_without_a_split_runs_the_engines_defaults(tmp_path: Path) -> None:
    # a file written before `parallelism` (the CPU deployments): no flag is added
    model = _model_dir(tmp_path)
    path = tmp_path / "deployment.yaml"
    path.write_text(
        f"model: {model}\ninstances:\n"
        "  - {name: pdd-0, role: pd-decode, cluster: pd, backend: vllm}\n"
    )
    deployment = load_deployment(path)
    spec = deployment.instances[0]
    ports = ChildPorts(http_port=1, events_port=2, status_path=tmp_path / "status.json")
    assert _engine_flags(serve_command(Path("python"), model, deployment, spec, ports)) == []


def test_a_vllm_pod_of_several_gpus_without_a_split_is_refused(tmp_path: Path) -> None:
    model = _model_dir(tmp_path)
    unsplit = DEPLOYMENT.replace(",\n     parallelism: {{tp: 2, dp: 2}}", "")
    description = write_description(tmp_path, unsplit.format(model=model), DESCRIPTION)
    with pytest.raises(DeploymentError) as err:
        render(description)
    assert str(err.value) == (
        "instances (pd, pd-decode): pdd-0: a vllm instance of 4 GPUs needs parallelism "
        "(e.g. {tp: 4}), else vllm runs on one of them"
    )
