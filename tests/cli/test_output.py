"""Output that survives redirection: full-width tables off a terminal, TSV and Markdown, help
without `<bool>` that lists the bundled scenarios, JSON untouched by progress bars."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_helpers import run

from prfaas.planner.scenario import bundled_scenarios


def test_redirected_table_is_not_cut(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan"], capsys)
    assert code == 0
    assert "…" not in out
    assert "equal-cost homogeneous" in out and "naive heterogeneous" in out
    assert max(len(line) for line in out.splitlines()) > 80  # not wrapped to 80 columns


def test_tsv_is_one_line_per_row_and_notes_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["kv-throughput", "--model", "prfaas-1t", "--format", "tsv"], capsys)
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert rows[0] == ["model", "length", "S_kv MiB", "T_prefill s", "Phi Gbps", "paper", "ratio"]
    assert [r[1] for r in rows[1:]] == ["1K", "8K", "32K", "128K"]
    assert all(len(r) == 7 for r in rows)
    assert "timing:" in err and "timing:" not in out


def test_markdown_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["plan", "--format", "markdown"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("### Plan: paper-case-study")
    header = next(line for line in lines if line.startswith("| "))
    assert header.count("|") == 6  # label + four deployments
    assert "| Lambda_max (req/s) |" in out


@pytest.mark.parametrize("command", ["plan", "simulate", "bench", "kv-throughput", "demo", "up"])
def test_help_has_no_bool_metavar(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    assert "<bool>" not in out
    assert "╭" not in out  # plain click help: wraps cleanly in a pipe


def test_help_keeps_examples_whole(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["bench", "--help"], capsys)
    assert "fixed:in=512,out=64" in out  # not cut across two lines


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_help_lists_the_bundled_scenarios(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run([command, "--help"], capsys)
    flat = " ".join(out.split())
    for name in bundled_scenarios():
        assert name in flat


def test_json_is_clean_when_stderr_is_a_pipe() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prfaas", "kv-throughput", "--model", "prfaas-1t", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(proc.stdout)[0]["model"] == "prfaas-1t"
    assert proc.stderr == ""
