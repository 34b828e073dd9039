"""Every command's `--help` reads as written: no `%%` (click prints help text as is, so an
argparse-style escape shows doubled)."""

from __future__ import annotations

import pytest
import typer
from cli_helpers import run

from prfaas.cli.app import app

COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_percent_signs_once(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    assert "%%" not in out
