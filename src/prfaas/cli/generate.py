"""`prfaas generate`: text from a preset or a local checkpoint on the reference engine.

The engine (torch, transformers) is imported inside the command, so the rest of the CLI
starts without it. With `--disaggregated`, one engine instance prefills, its layer-wise export
is serialised to bytes, and a second instance imports them and decodes: the PD handoff of the
paper on one machine. A preset has random weights: a one-line notice on stderr says so.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from prfaas.cli import checks


def _fail(message: str) -> typer.Exit:
    print(f"prfaas: error: {message}", file=sys.stderr)
    return typer.Exit(2)


def command(
    *,
    model: Annotated[
        str,
        typer.Option("--model", help="Preset name, 'smollm2-135m', a checkpoint dir or .gguf."),
    ] = "tiny-qwen3-next",
    prompt: Annotated[str | None, typer.Option("--prompt", help="Prompt text.")] = None,
    max_tokens: Annotated[
        int,
        typer.Option("--max-tokens", help="Tokens to generate.", callback=checks.positive_int),
    ] = 32,
    temperature: Annotated[
        float, typer.Option(help="0 for greedy.", callback=checks.non_negative)
    ] = 0.0,
    top_p: Annotated[
        float,
        typer.Option("--top-p", help="Nucleus mass, in (0, 1].", callback=checks.unit_interval),
    ] = 1.0,
    top_k: Annotated[
        int, typer.Option("--top-k", help="0: no limit.", callback=checks.non_negative_int)
    ] = 0,
    seed: Annotated[int, typer.Option(help="Sampling seed.", callback=checks.non_negative_int)] = 0,
    disaggregated: Annotated[
        bool, typer.Option("--disaggregated", help="Prefill on one instance, decode on another.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    list_models: Annotated[bool, typer.Option("--list-models", help="List presets.")] = False,
) -> None:
    """Generate a completion on CPU with the reference engine."""
    try:
        from prfaas.engine import (
            PRESETS,
            EngineError,
            SamplingParams,
            generate_text,
            load_model,
            random_weights_notice,
        )
    except ImportError as err:
        raise _fail(f"the engine needs the 'engine' extra ({err})") from None
    if list_models:
        for preset in PRESETS.values():
            typer.echo(f"{preset.name:20} {preset.description} (random weights)")
        typer.echo(
            f"{'smollm2-135m':20} SmolLM2-135M-Instruct GGUF, real weights (`make gguf-model`)"
        )
        return
    try:
        if not prompt:
            raise _fail("--prompt is empty")
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed
        )
        loaded = load_model(model)
        if loaded.random_weights:
            print(random_weights_notice(loaded.name), file=sys.stderr)
        result = generate_text(loaded, prompt, params, disaggregated=disaggregated)
    except EngineError as err:
        raise _fail(str(err)) from None
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
    else:
        typer.echo(result.text)
