"""`prfaas demo` end to end, as a newcomer runs it: the default preset and real SmolLM2 weights.

Each run starts real processes (router and three instances), sends the demo's prompts and
stops; the report must show both paths (the long prompts pass t with either tokenizer),
say when the weights are random, and end cleanly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _demo(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "prfaas", "demo", *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    return done.stdout


def _paths(report: str) -> set[str]:
    rows = [line.split() for line in report.splitlines() if line[:2].strip().isdigit()]
    return {row[-6] for row in rows if len(row) >= 9}


@pytest.mark.parametrize(
    ("args", "random_weights"), [((), True), (("--model", "smollm2-135m"), False)]
)
def test_the_demo_takes_both_paths_and_stops_cleanly(
    args: tuple[str, ...], random_weights: bool
) -> None:
    report = _demo(*args)
    assert _paths(report) == {"prfaas", "pd-p"}, report
    assert ("random weights" in report) is random_weights
    assert "stopped cleanly" in report
