"""Mooncake-format request traces (kvcache-ai/Mooncake, FAST25-release/traces).

One JSON object a line:

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ..., 13]}

`timestamp` is milliseconds since the trace start; `hash_ids` name the prompt's blocks of
`MOONCAKE_BLOCK_TOKENS` tokens, chained so that an equal id at the same position means an equal
prefix up to and including that block (the last block may be partial). Unknown keys are ignored,
so traces with extra fields still load. A bad line is a `SpecFileError` naming the line and key.

Callers: `workload.prefix` replays the hash ids through a prefix cache; the simulator and the
benchmark client replay the arrivals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from prfaas.specs.errors import SpecFileError
from prfaas.specs.files import one_line

#: Tokens per `hash_ids` block in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceRequest:
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


class _TraceLine(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False)
    timestamp: float = Field(ge=0)
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=0)
    hash_ids: list[int]


def parse_trace_line(line: str, where: str) -> TraceRequest:
    """One trace line; `where` (file:line) prefixes any error."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecFileError(f"{where}: not valid JSON ({err.msg})") from None
    try:
        parsed = _TraceLine.model_validate(raw)
    except ValidationError as err:
        raise SpecFileError(f"{where}: {one_line(err)}") from None
    return TraceRequest(
        timestamp_ms=parsed.timestamp,
        input_tokens=parsed.input_length,
        output_tokens=parsed.output_length,
        hash_ids=tuple(parsed.hash_ids),
    )


def read_mooncake_trace(path: Path) -> tuple[TraceRequest, ...]:
    """All requests of a trace file in arrival order (stable for equal timestamps)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecFileError(f"{path}: cannot read trace ({err.strerror})") from None
    requests = [
        parse_trace_line(line, f"{path}:{number}")
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not requests:
        raise SpecFileError(f"{path}: the trace has no requests")
    return tuple(sorted(requests, key=lambda r: r.timestamp_ms))
