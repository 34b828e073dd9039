"""The OpenAI-compatible edge: request bodies (validated strictly) and response bodies.

Strict types: `"max_tokens": "16"` is a 400, not a silent cast. Every sampling parameter is
checked against what the engine honours (`engine.sampling`), so no request content can reach
an instance that its sampler cannot take: `seed` a signed 64-bit integer (what
`torch.Generator.manual_seed` takes), `temperature` in [0, 2] (below `MIN_TEMPERATURE`,
denormals included, it is greedy: the engine samples in float32, where 1e-45 underflows),
`top_p` in (0, 1] (the most likely token is always kept, so a tiny top_p is greedy too),
`top_k` >= -1 (0 and -1: off), penalties finite in [-2, 2], at most `MAX_STOP_SEQUENCES`
non-empty stop strings of at most `MAX_STOP_CHARS` characters, `stream_options` an object of
booleans (or nulls) sent with `stream: true` only (`StreamOptions`).

OpenAI parameters the engine does not honour (`REFUSED`) are refused with a 400 naming the
parameter (`param`, code `unsupported_parameter`) whenever they ask for something other than
the default: a client that asks for `echo` must not get a response without it. Fields
nobody defines are ignored, as OpenAI-compatible servers do. `logprobs` (completions: 0..20;
chat: `logprobs: true` with `top_logprobs` 0..20) are computed by the engine and shaped here
(`completion_logprobs`, `chat_logprobs`).

Chat: `content` is a string or a list of `text` parts (any other part type is a 400). The
messages go to an instance as they are (`ChatCompletionRequest.chat`), whose engine renders
the model's chat template with vLLM's switches (`add_generation_prompt`,
`continue_final_message`, `add_special_tokens`, `chat_template_kwargs`); a backend without
one tokenizes a plain transcript (`protocol.transcript`).

`parse_body` is the one place raw bytes become a request: oversized -> 413, not JSON (or JSON
that `serve.edge.jsonbody` refuses) -> 400, schema violations -> 400 naming the field; all as
`ServeError`s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from prfaas.serve.edge.jsonbody import load_json
from prfaas.serve.errors import BadRequestError, PayloadTooLargeError
from prfaas.serve.protocol import ChatPrompt, ChatTurn, Logprob, TopLogprob

MAX_TOKENS_LIMIT = 1_000_000
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # torch.Generator seeds, signed 64-bit as sent on
MIN_TEMPERATURE = 1e-5  # below it sampling is greedy (as vLLM's _SAMPLING_EPS)
MAX_STOP_SEQUENCES = 16
MAX_STOP_CHARS = 1000
MAX_TOKEN_ID = 2**31 - 1
MAX_CHOICES = 128  # prompts x n: each is a request of its own through the scheduler
MAX_LOGPROBS = 20  # top alternatives per token (vLLM's default max_logprobs)
PROMPT_SHAPES = "a string, a list of strings, a list of token ids or a list of token-id lists"

#: One prompt: text (tokenized by an instance) or token ids (taken as they are).
Prompt = str | list[int]


def _unset(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, list | dict) and not value)


def _text_format(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("type") == "text")


#: OpenAI parameters the engine does not honour: name -> "the value asks for nothing".
REFUSED: dict[str, Callable[[Any], bool]] = {
    "echo": _unset,
    "best_of": lambda v: v is None or v == 1,
    "suffix": lambda v: v is None or v == "",
    "logit_bias": _unset,
    "response_format": _text_format,
    "tools": _unset,
    "tool_choice": lambda v: v is None or v == "none",
    "functions": _unset,
    "function_call": lambda v: v is None or v == "none",
    "presence_penalty": lambda v: v is None or v == 0,
    "frequency_penalty": lambda v: v is None or v == 0,
    "repetition_penalty": lambda v: v is None or v == 1,
    "min_p": lambda v: v is None or v == 0,
    "min_tokens": lambda v: v is None or v == 0,
    "audio": _unset,
    "modalities": lambda v: v is None or v == ["text"],
    "prediction": _unset,
}
MAX_SHOWN_CHARS = 60


class StreamOptions(BaseModel):
    """`stream_options`: OpenAI's `include_usage` (a last chunk with the usage) and vLLM's
    `continuous_usage_stats` (usage in every chunk too), each a boolean or null (unset).
    Other keys are ignored, as vLLM ignores them (OpenAI adds some, `include_obfuscation`)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=-1, le=2**31 - 1)
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    presence_penalty: float = Field(default=0.0, ge=-2, le=2, allow_inf_nan=False)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2, allow_inf_nan=False)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)

    @field_validator("stop")
    @classmethod
    def _stops_are_bounded(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        if any(not s or len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"every stop sequence has 1 to {MAX_STOP_CHARS} characters")
        return stop

    @field_validator("stream_options")
    @classmethod
    def _options_need_a_stream(
        cls, options: StreamOptions | None, info: ValidationInfo
    ) -> StreamOptions | None:
        """As vLLM and OpenAI: options of a stream, so only with `stream: true` (a `stream`
        that failed its own check is not in `info.data`: its error is the one reported)."""
        if options is not None and info.data.get("stream", True) is False:
            raise ValueError("only allowed with stream: true")
        return options

    @property
    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and bool(self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        """vLLM's `stream_options.continuous_usage_stats` (with `include_usage`): usage in
        every chunk of a stream, not only in the last one."""
        options = self.stream_options
        return options is not None and bool(options.continuous_usage_stats) and self.include_usage

    @property
    def sampling_temperature(self) -> float:
        """The temperature the engine uses: 0 (greedy) below `MIN_TEMPERATURE`."""
        return self.temperature if self.temperature >= MIN_TEMPERATURE else 0.0

    @property
    def sampling_top_k(self) -> int:
        return max(0, self.top_k)  # -1 (vLLM's "off") is 0 here


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def check_prompt(value: Any) -> Any:
    """`value` if it is one of OpenAI's prompt shapes with nothing empty, else a ValueError
    saying what is wrong (before pydantic's union, whose messages name its branches)."""
    if isinstance(value, str):
        if not value:
            raise ValueError("the prompt is empty")
        return value
    if not isinstance(value, list):
        raise ValueError(f"the prompt must be {PROMPT_SHAPES}")
    if not value:
        raise ValueError("the prompt is empty")
    if _is_token_ids(value):
        items: list[Any] = [value]
    elif all(isinstance(v, str) for v in value) or all(_is_token_ids(v) for v in value):
        items = value
    else:
        raise ValueError(f"the prompt must be {PROMPT_SHAPES}")
    for index, item in enumerate(items):
        if not item:
            raise ValueError(f"prompt {index} is empty")
        if isinstance(item, list) and not all(0 <= t <= MAX_TOKEN_ID for t in item):
            raise ValueError(f"prompt {index}: token ids are integers in [0, {MAX_TOKEN_ID}]")
    return value


class CompletionRequest(_Request):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    _prompt_shape = field_validator("prompt", mode="before")(check_prompt)

    @model_validator(mode="after")
    def _bounded_choices(self) -> CompletionRequest:
        if len(self.prompts) * self.n > MAX_CHOICES:
            raise ValueError(
                f"{len(self.prompts)} prompts x n {self.n} is more than {MAX_CHOICES} choices"
            )
        return self

    @property
    def num_logprobs(self) -> int | None:
        """None: no logprobs; k: each token's and its top k alternatives'."""
        return self.logprobs

    @property
    def prompts(self) -> list[Prompt]:
        """The prompts, in order: a string or a token-id list is one prompt."""
        if isinstance(self.prompt, str) or _is_token_ids(self.prompt):
            return [self.prompt]  # type: ignore[list-item]
        return list(self.prompt)  # type: ignore[arg-type]


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_only(self) -> TextPart:
        if self.type != "text":
            raise ValueError(f"content part type {self.type!r} is not supported (text only)")
        if self.text is None:
            raise ValueError("a text part needs its text")
        return self


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def turn(self) -> ChatTurn:
        if isinstance(self.content, str):
            return ChatTurn(role=self.role, content=self.content)
        parts = [{"type": "text", "text": part.text or ""} for part in self.content]
        return ChatTurn(role=self.role, content=parts)


class ChatFields(BaseModel):
    """A chat's messages and vLLM's chat-template switches: the chat endpoint's and
    `/tokenize`'s with messages, rendered by an instance as one `ChatPrompt`."""

    model_config = ConfigDict(extra="ignore", strict=True)

    messages: list[ChatMessage] = Field(min_length=1)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_ending(self) -> ChatFields:
        if self.add_generation_prompt and self.continue_final_message:
            raise ValueError("add_generation_prompt and continue_final_message exclude each other")
        return self

    @property
    def chat(self) -> ChatPrompt:
        return ChatPrompt(
            messages=[m.turn() for m in self.messages],
            add_generation_prompt=self.add_generation_prompt,
            continue_final_message=self.continue_final_message,
            add_special_tokens=self.add_special_tokens,
            chat_template_kwargs=self.chat_template_kwargs,
        )


class ChatCompletionRequest(_Request, ChatFields):
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)

    @model_validator(mode="after")
    def _top_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        return self

    @property
    def num_logprobs(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


_R = TypeVar("_R", bound=BaseModel)


def parse_body(raw: bytes, kind: type[_R], max_body_bytes: int) -> _R:
    if len(raw) > max_body_bytes:
        raise PayloadTooLargeError(f"request body of {len(raw)} bytes > {max_body_bytes}")
    data = load_json(raw)
    if not isinstance(data, dict):
        raise BadRequestError("the body must be a JSON object")
    try:
        req = kind.model_validate(data)
    except ValidationError as err:
        # a union's own check (a content part's type) says more than "not a string"
        first = max(err.errors(), key=lambda e: (e["type"] == "value_error", len(e["loc"])))
        where = ".".join(str(p) for p in first["loc"]) or "body"
        param = str(first["loc"][0]) if first["loc"] else None
        message = str(first["msg"]).removeprefix("Value error, ")
        raise BadRequestError(f"{where}: {message}", param=param) from None
    if isinstance(req, _Request):
        _refuse_unhonoured(data)
    return req


def _refuse_unhonoured(data: dict[str, Any]) -> None:
    for name, is_default in REFUSED.items():
        if name in data and not is_default(data[name]):
            shown = repr(data[name])[:MAX_SHOWN_CHARS]
            err = BadRequestError(
                f"{name}: {shown} is not supported by this server (docs/serving.md)", param=name
            )
            err.code = "unsupported_parameter"
            raise err


FINISH: dict[str, str] = {"eos": "stop", "stop": "stop", "length": "length"}


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage; `cached_tokens` are the prompt tokens served from the prefix cache
    (vLLM gives them with --enable-prompt-tokens-details; here always)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


def choice(
    is_chat: bool,
    text: str,
    finish: str | None,
    *,
    delta: bool,
    index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    reason = FINISH.get(finish, finish) if finish is not None else None
    if not is_chat:
        return {"index": index, "text": text, "finish_reason": reason, "logprobs": logprobs}
    key = "delta" if delta else "message"
    return {
        "index": index,
        key: {"role": "assistant", "content": text},
        "finish_reason": reason,
        "logprobs": logprobs,
    }


def completion_logprobs(
    entries: list[Logprob], num_top: int, text_offset: int = 0
) -> dict[str, Any]:
    """OpenAI's completions `logprobs` for `entries` (one per token): tokens, their
    logprobs, per token a dict of the sampled and the top `num_top` tokens (None when
    `num_top` is 0), and each token's character offset in the text from `text_offset`."""
    offsets: list[int] = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.token)
    top = [_by_text([e, *e.top]) for e in entries]
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": top if num_top else None,
        "text_offset": offsets,
    }


def _by_text(tokens: list[Logprob | TopLogprob]) -> dict[str, float]:
    """{text: logprob}, the first token of each text kept (tokens whose texts collide, such
    as lone bytes shown as U+FFFD, keep the sampled or better one)."""
    out: dict[str, float] = {}
    for t in tokens:
        out.setdefault(t.token, t.logprob)
    return out


def chat_logprobs(entries: list[Logprob]) -> dict[str, Any]:
    """OpenAI's chat `logprobs`: per token its text, logprob, bytes and top alternatives."""

    def named(t: TopLogprob) -> dict[str, Any]:
        return {"token": t.token, "logprob": t.logprob, "bytes": t.bytes}

    return {"content": [{**named(e), "top_logprobs": [named(t) for t in e.top]} for e in entries]}


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
