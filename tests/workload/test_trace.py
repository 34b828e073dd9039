"""Reading Mooncake-format traces: fields, order, one-line errors naming line and key."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from prfaas.specs.errors import SpecFileError
from prfaas.workload import TraceRequest, read_mooncake_trace


def write_trace(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_reads_requests_in_arrival_order_and_ignores_unknown_keys(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 20, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
            {"timestamp": 10, "input_length": 512, "output_length": 7, "hash_ids": [0], "x": 1},
        ],
    )
    assert read_mooncake_trace(path) == (
        TraceRequest(timestamp_ms=10, input_tokens=512, output_tokens=7, hash_ids=(0,)),
        TraceRequest(timestamp_ms=20, input_tokens=600, output_tokens=5, hash_ids=(0, 1)),
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "output_length": 1, "hash_ids": []}', "t.jsonl:2: input_length"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}', "input_length"),
        ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": []}', "timestamp"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}',
            "hash_ids.0",
        ),
        ("{not json", "t.jsonl:2: not valid JSON"),
    ],
)
def test_bad_lines_fail_with_the_line_and_key(tmp_path: Path, line: str, message: str) -> None:
    good = '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}'
    path = tmp_path / "t.jsonl"
    path.write_text(f"{good}\n{line}\n")
    with pytest.raises(SpecFileError, match=message) as info:
        read_mooncake_trace(path)
    assert "\n" not in str(info.value)


def test_missing_and_empty_traces_are_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match="cannot read trace"):
        read_mooncake_trace(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(SpecFileError, match="no requests"):
        read_mooncake_trace(tmp_path / "empty.jsonl")


def test_the_shared_conversation_trace_matches_its_readme(shared_trace: Path) -> None:
    requests = read_mooncake_trace(shared_trace)
    assert len(requests) == 12_031
    mean_input = sum(r.input_tokens for r in requests) / len(requests)
    assert mean_input == pytest.approx(12_035, abs=1)
    assert all(len(r.hash_ids) == -(-r.input_tokens // 512) for r in requests)
