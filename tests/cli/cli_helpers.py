"""The real entry point (`prfaas.cli.app.main`) run in process: exit status, stdout, stderr."""

from __future__ import annotations

import pytest

from prfaas.cli.app import main


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), out, err
