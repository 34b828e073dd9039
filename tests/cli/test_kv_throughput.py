"""`prfaas kv-throughput` and the CLI's error contract, run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prfaas import __version__


def prfaas(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "prfaas", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_reproduces_table5() -> None:
    result = prfaas("kv-throughput", "--model", "prfaas-1t", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["length"] for r in rows] == [1024, 8192, 32768, 131072]
    for row in rows:
        assert {"model", "length", "kv_bytes", "prefill_s", "phi_gbps", "paper_phi_gbps"} <= set(
            row
        )
        assert row["phi_gbps"] == pytest.approx(row["paper_phi_gbps"], rel=0.01)


def test_table_shows_every_ratio_and_the_summary() -> None:
    result = prfaas("kv-throughput", "--lengths", "1K,32K")
    assert result.returncode == 0, result.stderr
    assert "vs paper Table 3: 12 cells" in result.stdout
    assert "qwen3.5-397b" in result.stdout


def test_options_select_chip_gpus_and_lengths() -> None:
    result = prfaas(
        "kv-throughput", "-m", "qwen3-235b,kimi-linear-48b", "--chip", "b200", "--gpus", "4",
        "--lengths", "2K", "--json",
    )  # fmt: skip
    rows = json.loads(result.stdout)
    assert [(r["model"], r["chip"], r["gpus_per_instance"], r["length"]) for r in rows] == [
        ("qwen3-235b", "b200", 4, 2048),
        ("kimi-linear-48b", "b200", 4, 2048),
    ]
    assert all(r["paper_phi_gbps"] is None for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["--chip", "tpu7"], "unknown chip 'tpu7'"),
        (["--lengths", "12Q"], "malformed token count '12Q'"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(args: list[str], message: str) -> None:
    result = prfaas("kv-throughput", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unsupported_config_family_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "rwkv7", "hidden_size": 2048}))
    result = prfaas("kv-throughput", "--model", str(config))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "prfaas: error: unsupported model_type 'rwkv7' (supported: "
        + result.stderr.split("(supported: ")[1].strip()
    )
    assert "Traceback" not in result.stderr


def test_version_and_help() -> None:
    assert prfaas("--version").stdout.strip() == f"prfaas {__version__}"
    help_text = prfaas("--help").stdout
    assert "kv-throughput" in help_text
