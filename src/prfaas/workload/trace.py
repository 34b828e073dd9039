"""Mooncake-format request traces (kvcache-ai/Mooncake, FAST25-release/traces).

One JSON object a line:

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ..., 13]}

`timestamp` is milliseconds since the trace start; `hash_ids` name the prompt's blocks of
`MOONCAKE_BLOCK_TOKENS` tokens, chained so that an equal id at the same position means an equal
prefix up to and including that block (the last block may be partial). Unknown keys are ignored,
so traces with extra fields still load. A bad line is a `SpecFileError` naming the line and key:
numbers must be JSON numbers (`true` is not a length), finite, and in range (a timestamp within
`MAX_TIMESTAMP_MS`, lengths within `MAX_TRACE_TOKENS`), and a line may name at most as many
`hash_ids` as its prompt has blocks. Lines need not be in timestamp order: the requests are
sorted by timestamp at load (stable for equal timestamps), as a trace merged from several
front-ends often is not. A trace whose every `output_length` is 0 is refused: nothing would
be decoded, and the decode stage's rate (planner and simulator) is undefined.

Callers: `workload.prefix` replays the hash ids through a prefix cache; the simulator and the
benchmark client replay the arrivals.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prfaas.specs.errors import SpecFileError
from prfaas.specs.files import one_line

#: Tokens per `hash_ids` block in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512
#: Latest accepted timestamp: one year, in ms (a replay past it is a typo, never a trace).
MAX_TIMESTAMP_MS = 365 * 24 * 3600 * 1000.0
#: Largest accepted prompt or output length (16 Mi tokens, above any model's context).
MAX_TRACE_TOKENS = 1 << 24


@dataclass(frozen=True, slots=True)
class TraceRequest:
    timestamp_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]


class _TraceLine(BaseModel):
    # strict: a JSON `true` is not the length 1, a string is not a number
    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    timestamp: float = Field(ge=0, le=MAX_TIMESTAMP_MS)
    input_length: int = Field(ge=1, le=MAX_TRACE_TOKENS)
    output_length: int = Field(ge=0, le=MAX_TRACE_TOKENS)
    hash_ids: list[int]

    @field_validator("timestamp", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        if isinstance(value, bool):  # strict floats still take JSON true as 1.0
            raise ValueError("a timestamp is a number of ms, not a boolean")
        return value


def parse_trace_line(
    line: str, where: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> TraceRequest:
    """One trace line; `where` (file:line) prefixes any error. `block_tokens` is the size of
    one `hash_ids` block, which bounds how many ids the prompt can have."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        raise SpecFileError(f"{where}: not valid JSON ({err.msg})") from None
    try:
        parsed = _TraceLine.model_validate(raw)
    except ValidationError as err:
        raise SpecFileError(f"{where}: {one_line(err)}") from None
    num_blocks = -(-parsed.input_length // block_tokens)
    if len(parsed.hash_ids) > num_blocks:
        raise SpecFileError(
            f"{where}: {len(parsed.hash_ids)} hash_ids for an input_length of "
            f"{parsed.input_length} tokens ({num_blocks} blocks of {block_tokens})"
        )
    return TraceRequest(
        timestamp_ms=parsed.timestamp,
        input_tokens=parsed.input_length,
        output_tokens=parsed.output_length,
        hash_ids=tuple(parsed.hash_ids),
    )


def read_mooncake_trace(
    path: Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> tuple[TraceRequest, ...]:
    """All requests of a trace file in arrival order (sorted by timestamp, stable)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecFileError(f"{path}: cannot read trace ({err.strerror})") from None
    requests = [
        parse_trace_line(line, f"{path}:{number}", block_tokens)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not requests:
        raise SpecFileError(f"{path}: the trace has no requests")
    if not any(r.output_tokens for r in requests):
        raise SpecFileError(f"{path}: every request has output_length 0 (nothing to decode)")
    return tuple(sorted(requests, key=lambda r: r.timestamp_ms))
