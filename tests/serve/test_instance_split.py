"""An instance's `parallelism` and `timing` in the deployment file (issue 30): validated against
its GPUs, its model and its engine; left out, the split every plan made before the search and
the roofline; an emulated instance is timed by that source at that split, as the plan timed
it (serve.backends.emulated.instance_profile), falling back to the roofline with one logged
line where the source cannot time it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.serve.backends.emulated import instance_profile
from prfaas.serve.config.deployment import Deployment, load_deployment
from prfaas.serve.errors import DeploymentError
from prfaas.specs import aic
from prfaas.specs.catalog import get_chip, get_model, profile_for
from prfaas.specs.timing import Parallelism, default_parallelism


def _instance(**fields: Any) -> dict[str, Any]:
    base = {
        "name": "pdp-0",
        "role": "pd-prefill",
        "cluster": "pd",
        "backend": "emulated",
        "chip": "h200",
        "gpus_per_instance": 8,
    }
    return base | fields


def _load(tmp_path: Path, model: str, *instances: dict[str, Any], **top: Any) -> Deployment:
    path = tmp_path / "deployment.yaml"
    path.write_text(json.dumps({"model": model, "instances": list(instances), **top}))
    return load_deployment(path)


def _refusal(tmp_path: Path, model: str, *instances: dict[str, Any], **top: Any) -> str:
    with pytest.raises(DeploymentError) as err:
        _load(tmp_path, model, *instances, **top)
    return str(err.value)


def test_a_written_split_is_the_instances_split(tmp_path: Path) -> None:
    split = {"tp": 1, "dp": 8, "ep": 8}
    deployment = _load(tmp_path, "qwen3-235b", _instance(parallelism=split))
    assert deployment.split_of(deployment.instances[0]) == Parallelism(tp=1, ep=8, dp=8)


def test_a_file_without_a_split_means_what_it_meant(tmp_path: Path) -> None:
    # the default split, timed by the roofline: the profile every emulated instance had
    deployment = _load(tmp_path, "qwen3-235b", _instance(gpus_per_instance=4))
    spec = deployment.instances[0]
    model = get_model("qwen3-235b")
    assert deployment.split_of(spec) == default_parallelism(model, 4)
    assert instance_profile(deployment, spec) == profile_for(model, get_chip("h200"), 4)


@settings(max_examples=60, deadline=None)
@given(tp=st.integers(1, 8), dp=st.integers(1, 8), ep=st.integers(1, 8), gpus=st.integers(1, 8))
def test_a_split_is_accepted_exactly_when_it_splits_the_gpus(
    tmp_path_factory: pytest.TempPathFactory, tp: int, dp: int, ep: int, gpus: int
) -> None:
    tmp_path = tmp_path_factory.mktemp("split")
    split = {"tp": tp, "dp": dp, "ep": ep}
    instance = _instance(gpus_per_instance=gpus, parallelism=split)
    if tp * dp == gpus and gpus % ep == 0:
        deployment = _load(tmp_path, "qwen3-235b", instance)
        assert deployment.split_of(deployment.instances[0]) == Parallelism(tp=tp, ep=ep, dp=dp)
    else:
        refusal = _refusal(tmp_path, "qwen3-235b", instance)
        assert "instances.0: Value error, parallelism: " in refusal
        assert refusal.count("\n") == 0


@pytest.mark.parametrize(
    ("model", "fields", "message"),
    [
        (
            "qwen3-235b",
            {"parallelism": {"tp": 2, "dp": 2}},
            "parallelism: tp 2 x dp 2 = 4 GPUs, but gpus_per_instance is 8",
        ),
        (
            "qwen3-235b",
            {"parallelism": {"tp": 8, "ep": 3}},
            "parallelism: ep 3 does not divide the instance's 8 GPUs",
        ),
        (
            "llama-3.1-70b",
            {"parallelism": {"tp": 8, "ep": 8}},
            "instance pdp-0: parallelism: ep 8: llama-3.1-70b is dense (no experts), so ep "
            "must be 1",
        ),
        (
            "tiny-qwen3-next",
            {"backend": "torch", "chip": None, "parallelism": {"tp": 8}},
            "parallelism is for emulated and vllm instances (torch: one device)",
        ),
        (
            "tiny-qwen3-next",
            {"backend": "torch", "chip": None, "timing": {"source": "aic"}},
            "timing is for emulated instances only (backend: emulated)",
        ),
    ],
)
def test_a_split_that_cannot_run_is_refused_in_one_line(
    tmp_path: Path, model: str, fields: dict[str, Any], message: str
) -> None:
    assert message in _refusal(tmp_path, model, _instance(**fields))


def test_a_vllm_split_with_experts_over_part_of_the_ranks_is_refused(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    instance = _instance(backend="vllm", chip=None, parallelism={"tp": 4, "dp": 2, "ep": 2})
    refusal = _refusal(tmp_path, str(model_dir), instance)
    assert refusal.count("\n") == 0
    assert "vllm cannot run ep 2 of 8 GPUs" in refusal
    assert "(ep 8, --enable-expert-parallel)" in refusal


def test_vllm_extra_args_may_not_set_the_split_twice(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    instance = _instance(backend="vllm", chip=None, parallelism={"tp": 8})
    vllm = {"extra_args": ["--tensor-parallel-size=4"]}
    refusal = _refusal(tmp_path, str(model_dir), instance, vllm=vllm)
    assert "vllm.extra_args sets --tensor-parallel-size, which the instances' parallelism" in (
        refusal
    )


def test_an_emulated_instance_is_timed_by_its_source_at_its_split(tmp_path: Path) -> None:
    pytest.importorskip("aiconfigurator_core")
    split = {"tp": 4, "dp": 1, "ep": 1}
    instance = _instance(
        gpus_per_instance=4, parallelism=split, timing={"source": "aic", "engine": "sglang"}
    )
    deployment = _load(tmp_path, "qwen3-235b", instance)
    profile = instance_profile(deployment, deployment.instances[0])
    assert isinstance(profile, aic.AicProfile)
    assert profile.split == Parallelism(tp=4, ep=1, dp=1)
    assert profile.engine == "sglang"
    assert "aiconfigurator" in profile.source and "tp4)" in profile.source


def test_aiconfigurator_missing_at_up_gives_the_roofline_and_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(aic, "aic_version", lambda: None)
    instance = _instance(
        gpus_per_instance=4,
        parallelism={"tp": 4, "dp": 1, "ep": 1},
        timing={"source": "aic", "engine": "vllm"},
    )
    deployment = _load(tmp_path, "qwen3-235b", instance)
    with caplog.at_level(logging.WARNING, logger="prfaas.emulated"):
        profile = instance_profile(deployment, deployment.instances[0])
    assert profile == profile_for(get_model("qwen3-235b"), get_chip("h200"), 4)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("instance pdp-0: timing: aiconfigurator (vllm) cannot time")
    assert "aiconfigurator-core is not installed" in line and "roofline" in line
