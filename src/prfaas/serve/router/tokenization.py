"""vLLM's tokenizer and model endpoints on the router: `/tokenize`, `/detokenize`,
`/v1/models`, `/version`.

The router encodes prompts as the instances do (`serve.router.prompt_tokens`: itself for the
byte tokenizer and for a checkpoint whose tokenizer it reads, else by asking an instance), so the
ids `/tokenize` returns are exactly the ones `/v1/completions` would prefill for that prompt
(and, with `messages`, the ones `/v1/chat/completions` would). Shapes follow vLLM's server
(`vllm/entrypoints/openai/protocol.py`, `serving_tokenization.py`, `serving_models.py`):

    POST /tokenize    {model, prompt}  or  {model, messages}  ->  {count, max_model_len,
                                                                   tokens, token_strs: null}
    POST /detokenize  {model, tokens}                          ->  {prompt}
    GET  /v1/models   {object: list, data: [{id, object, created, owned_by, root, parent,
                                             max_model_len, permission: [...]}]}
    GET  /version     {version}

`add_special_tokens: false` on a prompt gives the text's own ids (no `<bos>`, no chat
template), as vLLM; `vllm bench serve` sends it to check its local tokenizer against the
server's. A chat is encoded as the chat endpoint encodes it, with the same switches
(`add_generation_prompt`, `continue_final_message`, `add_special_tokens`,
`chat_template_kwargs`: `protocol.ChatPrompt`). `return_token_strs: true` is refused with a
400 `unsupported_parameter`, never silently ignored.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

import prfaas
from prfaas.serve.edge.jsonbody import load_json
from prfaas.serve.edge.openai_api import MAX_TOKEN_ID, ChatFields, parse_body
from prfaas.serve.errors import BadRequestError, ModelNotFoundError
from prfaas.serve.router.flow import RouterRuntime, check_token_ids


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str


class TokenizePrompt(_Body):
    prompt: str = Field(min_length=1)
    add_special_tokens: bool = True


class TokenizeChat(_Body, ChatFields):
    """`/tokenize` with messages: the ids the chat endpoint would prefill for them."""


class Detokenize(_Body):
    tokens: list[Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]]


def _refuse(name: str, value: Any) -> None:
    err = BadRequestError(
        f"{name}: {value!r} is not supported by this server (docs/serving.md)", param=name
    )
    err.code = "unsupported_parameter"
    raise err


def _checked_model(rt: RouterRuntime, body: _Body) -> None:
    if body.model != rt.deployment.model_name:
        raise ModelNotFoundError(f"the model {body.model!r} does not exist")


async def tokenize_body(rt: RouterRuntime, raw: bytes) -> dict[str, Any]:
    """`/tokenize`: the prompt's ids (or the chat's) as the completions use."""
    limit = rt.deployment.router.max_body_bytes
    data = load_json(raw) if len(raw) <= limit else None
    body: TokenizePrompt | TokenizeChat
    if isinstance(data, dict) and "messages" in data:
        body = parse_body(raw, TokenizeChat, limit)
    else:
        body = parse_body(raw, TokenizePrompt, limit)
    if isinstance(data, dict) and data.get("return_token_strs"):
        _refuse("return_token_strs", data["return_token_strs"])
    _checked_model(rt, body)
    if isinstance(body, TokenizeChat):
        tokens = await rt.prompts.encode_chat(body.chat)
    else:
        tokens = await rt.prompts.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    return {
        "count": len(tokens),
        "max_model_len": rt.registry.max_context_tokens(),
        "tokens": tokens,
        "token_strs": None,
    }


async def detokenize_body(rt: RouterRuntime, raw: bytes) -> dict[str, Any]:
    """`/detokenize`: the text of the ids (special tokens dropped)."""
    body = parse_body(raw, Detokenize, rt.deployment.router.max_body_bytes)
    _checked_model(rt, body)
    check_token_ids(rt, body.tokens, "tokens")
    text = await rt.prompts.decode(body.tokens) if body.tokens else ""
    return {"prompt": text}


def model_card(rt: RouterRuntime, created: int) -> dict[str, Any]:
    """The served model as vLLM's `ModelCard` (with its one `ModelPermission`)."""
    name = rt.deployment.model_name
    permission = {
        "id": f"modelperm-{uuid.uuid5(uuid.NAMESPACE_URL, name).hex}",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "prfaas",
        "root": rt.deployment.model,
        "parent": None,
        "max_model_len": rt.registry.max_context_tokens() or None,
        "permission": [permission],
    }


def register_tokenization(app: FastAPI, runtime: Callable[[], RouterRuntime]) -> None:
    created = int(time.time())

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(runtime(), created)]}

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": prfaas.__version__}

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> dict[str, Any]:
        return await tokenize_body(runtime(), await request.body())

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> dict[str, Any]:
        return await detokenize_body(runtime(), await request.body())
