"""`prfaas generate`: presets listed, text out, clear errors, the random-weight notice, and
SmolLM2 (installed by `make test`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prfaas.cli.app import app


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and what reached the terminal (stdout and stderr)."""
    result = CliRunner().invoke(app, ["generate", *args])
    return result.exit_code, result.output


def test_list_models_names_every_preset() -> None:
    code, output = invoke("--list-models")
    assert code == 0
    from prfaas.engine import PRESETS

    for name in [*PRESETS, "smollm2-135m"]:
        assert name in output


def test_disaggregated_generation_prints_json() -> None:
    args = ["--model", "tiny-llama", "--prompt", "Hi", "--max-tokens", "4", "--disaggregated"]
    run = CliRunner().invoke(app, ["generate", *args, "--json"])
    assert run.exit_code == 0
    result = json.loads(run.stdout)  # the random-weight notice goes to stderr
    assert result["disaggregated"] and len(result["token_ids"]) <= 4
    assert result["exported_bytes"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "tiny-gpt", "--prompt", "x"), "unknown model"),
        (("--model", "./no/such/dir", "--prompt", "x"), "no such checkpoint"),
        (("--model", "tiny-llama", "--prompt", ""), "prompt is empty"),
        (("--model", "tiny-llama", "--prompt", "x", "--max-tokens", "0"), "--max-tokens"),
        (("--model", "tiny-llama", "--prompt", "x", "--max-tokens", "5000"), "context"),
    ],
)
def test_bad_input_gives_a_clear_error(args: tuple[str, ...], message: str) -> None:
    code, output = invoke(*args)
    assert code == 2
    assert message in output


@pytest.mark.slow
def test_smollm2_answers_through_the_disaggregated_path() -> None:
    code, output = invoke(
        "--model",
        "smollm2-135m",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "16",
        "--disaggregated",
    )
    assert code == 0
    assert "Paris" in output
    assert "random weights" not in output


def test_a_preset_says_its_weights_are_random() -> None:
    result = CliRunner().invoke(app, ["generate", "--model", "tiny-llama", "--prompt", "Hi"])
    assert result.exit_code == 0
    assert "tiny-llama has random weights" in result.stderr
    assert "random weights" not in result.stdout
