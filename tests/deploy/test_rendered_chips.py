"""A deployment on a chip it describes itself (`chips:`, issue 30 point 4) renders: the file
every pod reads carries the section, and its instances resolve to the described chip."""

from __future__ import annotations

from pathlib import Path

import yaml
from k8s_checks import write_description

from prfaas.deploy.pod_scripts import DEPLOYMENT_FILE, write_pod_scripts
from prfaas.deploy.render import render, write
from prfaas.serve.config.deployment import load_deployment
from prfaas.specs.files import ChipFile
from shared_specs import H100_NVL

DEPLOYMENT = {
    "model": "llama-3.1-70b",
    "chips": {"h100-nvl": H100_NVL},
    "instances": [
        {"name": n, "role": r, "cluster": "pd", "backend": "emulated", "chip": "h100-nvl"}
        for n, r in (("pdp-0", "pd-prefill"), ("pdd-0", "pd-decode"))
    ],
}
DESCRIPTION = """\
deployment: deployment.yaml
router: {cluster: pd}
clusters: {pd: {image: img, accelerator: none}}
"""


def test_the_pods_file_keeps_the_described_chip(tmp_path: Path) -> None:
    rendered = render(write_description(tmp_path, yaml.safe_dump(DEPLOYMENT), DESCRIPTION))
    out, scripts = tmp_path / "out", tmp_path / "pods"
    write(rendered, out)
    write_pod_scripts(out, scripts, "python")
    deployment = load_deployment(scripts / DEPLOYMENT_FILE)  # what every pod reads
    expected = ChipFile.model_validate(H100_NVL).to_spec("h100-nvl")
    assert [deployment.chip_of(spec) for spec in deployment.instances] == [expected, expected]
