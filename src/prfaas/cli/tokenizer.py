"""`prfaas tokenizer`: the served model's tokenizer as a local Hugging Face directory.

Clients that count tokens load it: `guidellm ... --processor DIR`, `vllm bench serve
--tokenizer DIR`, or `transformers.AutoTokenizer.from_pretrained(DIR)`; it encodes as the
server does (`engine.models.save_tokenizer`), chats included: the byte tokenizer of presets
and catalog models carries the template the server renders chats with
(`serve.protocol.TRANSCRIPT_CHAT_TEMPLATE`), so `apply_chat_template` counts what the chat
endpoint counts. Nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer


def command(
    *,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Preset, catalog model (emulated), 'smollm2-135m', a checkpoint dir or .gguf.",
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Directory to write (created).")],
) -> None:
    """Write the served model's tokenizer to a directory clients can load."""
    from prfaas.engine import ModelLoadError
    from prfaas.engine.models import save_tokenizer
    from prfaas.serve.protocol import TRANSCRIPT_CHAT_TEMPLATE

    if out.exists() and not out.is_dir():
        print(f"prfaas: error: --out {out} exists and is not a directory", file=sys.stderr)
        raise typer.Exit(2)
    try:
        kind = save_tokenizer(model, out, byte_chat_template=TRANSCRIPT_CHAT_TEMPLATE)
    except ModelLoadError as err:
        print(f"prfaas: error: {err}", file=sys.stderr)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {kind} for {model} to {out}")
