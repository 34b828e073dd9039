"""Admission control is on by default in a live deployment (issue 27); off is explicit."""

from __future__ import annotations

from pathlib import Path

from prfaas.scheduler import AdmissionMode, admission_policy
from prfaas.serve.config.deployment import default_deployment, load_deployment

FILE = """\
model: tiny-qwen3-next
router: {port: 0%s}
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas}
  - {name: pdd-0, role: pd-decode, cluster: pd}
"""


def test_a_deployment_that_names_no_admission_sheds_at_its_slo(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(FILE % "")
    for deployment in (load_deployment(path), default_deployment()):
        spec = deployment.router.admission
        policy = admission_policy(spec, spec.ttft_slo_s)
        assert policy is not None
        assert (policy.config.mode, policy.config.ttft_slo_s) == (AdmissionMode.SHED, 10.0)


def test_off_is_an_explicit_choice_quoted_or_bare(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    for mode in ('"off"', "off"):  # YAML 1.1 reads a bare off as false: it still means off
        path.write_text(FILE % f", admission: {{mode: {mode}}}")
        spec = load_deployment(path).router.admission
        assert admission_policy(spec, spec.ttft_slo_s) is None
