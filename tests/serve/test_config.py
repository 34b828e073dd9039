"""The deployment file: defaults, strict parsing, one-line errors, ports and the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    default_deployment,
    load_deployment,
    transfer_secret,
)
from prfaas.serve.errors import DeploymentError
from prfaas.transfer.config import SECRET_ENV_VAR

GOOD = """\
model: tiny-qwen3-next
served_model_name: demo
threshold_tokens: 128
router: {port: 9000}
link: {rate_gbps: 2.5, rtt_ms: 5}
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas, http_port: 9101}
  - {name: pdd-0, role: pd-decode, cluster: pd}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "deploy.yaml"
    path.write_text(text)
    return path


def test_no_file_is_the_built_in_default() -> None:
    d = load_deployment(None)
    assert d == default_deployment()
    assert [(i.name, i.role, i.cluster) for i in d.instances] == [
        ("prfaas-0", InstanceRole.PRFAAS_PREFILL, "prfaas"),
        ("pdp-0", InstanceRole.PD_PREFILL, "pd"),
        ("pdd-0", InstanceRole.PD_DECODE, "pd"),
    ]
    assert (d.threshold_tokens, d.link.rate_gbps, d.link.rtt_ms) == (96, 1.0, 20.0)
    assert d.model_name == "tiny-qwen3-next"


def test_a_file_is_read_with_defaults_for_what_it_omits(tmp_path: Path) -> None:
    d = load_deployment(_write(tmp_path, GOOD))
    assert (d.model_name, d.threshold_tokens, d.router.port, d.router.host) == (
        "demo",
        128,
        9000,
        "127.0.0.1",
    )
    assert d.link.rate_bytes_per_s == 2.5e9 / 8
    assert d.instance("prfaas-0").url == "http://127.0.0.1:9101"
    assert d.instance("pdd-0").capacity_mib == 64
    assert InstanceRole.PD_PREFILL.is_prefill and not InstanceRole.PD_DECODE.is_prefill


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD + "colour: blue\n", "deploy.yaml: colour: Extra inputs are not permitted"),
        (
            GOOD.replace("prfaas-prefill", "prefill"),
            "deploy.yaml: instances.0.role: Input should be 'prfaas-prefill', 'pd-prefill' "
            "or 'pd-decode'",
        ),
        (GOOD.replace("threshold_tokens: 128", "threshold_tokens: -1"), "threshold_tokens"),
        (GOOD.replace("rate_gbps: 2.5", "rate_gbps: 0"), "link.rate_gbps"),
        (GOOD.replace("http_port: 9101", "http_port: 70000"), "instances.0.http_port"),
        (GOOD.replace("name: pdd-0", "name: 'pdd 0'"), "instances.1.name"),
        ("model: tiny-qwen3-next\n", "deploy.yaml: instances: Field required"),
        ("instances: [\n", "deploy.yaml is not valid YAML"),
        ("- just\n- a list\n", "deploy.yaml: top level: Input should be an object"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DeploymentError) as caught:
        load_deployment(_write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_a_deployment_error(tmp_path: Path) -> None:
    with pytest.raises(DeploymentError, match=r"cannot read .*nope\.yaml: No such file"):
        load_deployment(tmp_path / "nope.yaml")


def test_unknown_instance_name() -> None:
    with pytest.raises(DeploymentError, match="no instance named 'x'"):
        default_deployment().instance("x")


def test_transfer_secret_file_then_environment_never_a_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = default_deployment()
    monkeypatch.delenv(SECRET_ENV_VAR, raising=False)
    with pytest.raises(DeploymentError, match="no transfer secret"):
        transfer_secret(d)
    monkeypatch.setenv(SECRET_ENV_VAR, "from-env")
    assert transfer_secret(d) == b"from-env"
    assert transfer_secret(d.model_copy(update={"secret": "from-file"})) == b"from-file"


def test_deployment_is_frozen() -> None:
    d = default_deployment()
    with pytest.raises(ValueError, match="frozen"):
        d.threshold_tokens = 5  # type: ignore[misc]
    assert isinstance(d, Deployment)
