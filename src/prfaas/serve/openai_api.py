"""The OpenAI-compatible edge: request bodies (validated strictly) and response bodies.

Strict types: `"max_tokens": "16"` is a 400, not a silent cast. Unknown fields are ignored, as
OpenAI-compatible servers do for options they do not implement (`n` > 1 and `logprobs` are
refused explicitly). `parse_body` is the one place raw bytes become a request: oversized ->
413, not JSON -> 400, schema violations -> 400 naming the field; all as `ServeError`s.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from prfaas.serve.errors import BadRequestError, PayloadTooLargeError

MAX_TOKENS_LIMIT = 1_000_000


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(default=1, ge=1, le=1)
    ignore_eos: bool = False

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


class CompletionRequest(_Request):
    prompt: str | list[str]

    @model_validator(mode="after")
    def _one_prompt(self) -> CompletionRequest:
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            raise ValueError("exactly one prompt per request is supported")
        if not self.text:
            raise ValueError("the prompt is empty")
        return self

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)

    @property
    def text(self) -> str:
        """A plain transcript: presets have no chat template (checkpoints would use theirs)."""
        lines = [f"{m.role}: {m.content}" for m in self.messages]
        return "\n".join([*lines, "assistant:"])


_R = TypeVar("_R", bound=_Request)


def parse_body(raw: bytes, kind: type[_R], max_body_bytes: int) -> _R:
    if len(raw) > max_body_bytes:
        raise PayloadTooLargeError(f"request body of {len(raw)} bytes > {max_body_bytes}")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BadRequestError(f"the body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadRequestError("the body must be a JSON object")
    try:
        return kind.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadRequestError(f"{where}: {first['msg']}") from None


FINISH: dict[str, str] = {"eos": "stop", "stop": "stop", "length": "length"}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def choice(is_chat: bool, text: str, finish: str | None, *, delta: bool) -> dict[str, Any]:
    reason = FINISH.get(finish, finish) if finish is not None else None
    if not is_chat:
        return {"index": 0, "text": text, "finish_reason": reason, "logprobs": None}
    key = "delta" if delta else "message"
    return {
        "index": 0,
        key: {"role": "assistant", "content": text},
        "finish_reason": reason,
        "logprobs": None,
    }


def envelope(
    is_chat: bool, request_id: str, model: str, *, chunk: bool, **fields: Any
) -> dict[str, Any]:
    kind = "chat.completion" if is_chat else "text_completion"
    if chunk and is_chat:
        kind += ".chunk"
    return {
        "id": request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        **fields,
    }
