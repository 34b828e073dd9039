"""A model outside the catalog, given by its config.json, is timed by aiconfigurator when it
models one of the same architecture and shapes (`specs.aic_match`), and says which; a config
with one timing field changed is not (issue 30)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aic_helpers import DEEPSEEK_V3, timed_at_8

from prfaas.specs import aic
from prfaas.specs.catalog import resolve_model
from prfaas.specs.model import ModelSpec
from prfaas.specs.timing import AicEngine, TimingChoice, TimingSource
from shared_specs import needs_aic


def _edited_config(tmp_path: Path, name: str, **changes: object) -> ModelSpec:
    """DeepSeek-V3's config.json with `changes` (None deletes a key), as a file of its own."""
    raw = json.loads(DEEPSEEK_V3.read_text())
    for key, value in changes.items():
        if value is None:
            del raw[key]
        else:
            raw[key] = value
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(raw))
    return resolve_model(str(path))


@needs_aic
def test_a_config_json_of_a_model_aiconfigurator_has_is_timed_by_it() -> None:
    # DeepSeek-V3 is not in our catalog; its config.json has the shapes (and fp8 block
    # quantization) of aiconfigurator's deepseek-ai/DeepSeek-V3, and DeepSeek-R1's too.
    spec = resolve_model(str(DEEPSEEK_V3))
    assert aic.aic_model_id(spec) == "deepseek-ai/DeepSeek-V3"  # named after it, not R1
    timed = timed_at_8(spec, "h200", TimingChoice(TimingSource.AIC, AicEngine.VLLM))
    assert timed.fallback is None
    assert timed.profile.source.endswith(", tp8 ep8, as deepseek-ai/DeepSeek-V3)")
    assert 0 < timed.profile.prefill_s(1024) < timed.profile.prefill_s(8192)


@needs_aic
@pytest.mark.parametrize("engine", [AicEngine.SGLANG, AicEngine.TRTLLM])
def test_a_matched_model_without_data_for_the_engine_says_which_it_matched(
    engine: AicEngine,
) -> None:
    # aiconfigurator times DeepSeek's fp8 checkpoint with fp8 attention, which its SGLang and
    # TensorRT-LLM tables on H200 lack: the one line names the model it matched, not "does
    # not model".
    timed = timed_at_8(
        resolve_model(str(DEEPSEEK_V3)), "h200", TimingChoice(TimingSource.AIC, engine)
    )
    assert timed.fallback is not None
    assert "it has no data to time deepseek-ai/DeepSeek-V3 as tp8 ep8" in timed.fallback


@needs_aic
def test_a_checkpoint_directory_is_matched_as_its_config(tmp_path: Path) -> None:
    checkpoint = tmp_path / "my-deepseek"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text(DEEPSEEK_V3.read_text())
    # Named after neither: the first of the two of identical shapes (they time the same).
    assert aic.aic_model_id(resolve_model(str(checkpoint))) == "deepseek-ai/DeepSeek-R1"


@needs_aic
@pytest.mark.parametrize(
    "changes",
    [
        {"num_hidden_layers": 60},  # one field that decides its timing changed
        {"n_routed_experts": 128},
        {"quantization_config": None},  # bf16 weights: kernels aiconfigurator did not time
    ],
    ids=["layers", "experts", "quantization"],
)
def test_a_config_with_other_shapes_falls_back_with_the_one_line(
    tmp_path: Path, changes: dict[str, object]
) -> None:
    spec = _edited_config(tmp_path, "deepseek-v3-edited", **changes)
    assert aic.aic_model_id(spec) is None
    assert timed_at_8(spec, "h200").fallback == (
        "timing: aiconfigurator (sglang) cannot time deepseek-v3-edited on 8 x h200: it does "
        "not model deepseek-v3-edited; timed by the default (roofline) source instead"
    )


@needs_aic
def test_the_context_length_does_not_decide_the_match(tmp_path: Path) -> None:
    # It bounds prompts; no kernel's time depends on it.
    spec = _edited_config(tmp_path, "deepseek-v3", max_position_embeddings=262_144)
    assert aic.aic_model_id(spec) == "deepseek-ai/DeepSeek-V3"
