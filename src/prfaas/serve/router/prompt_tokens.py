"""A prompt's token ids, and ids back to text, for the router's endpoints.

Where the instances say their prompts are the byte tokenizer's (`/info` capabilities
`byte_tokenizer`: the emulated backend, torch's random presets) the router encodes them itself
(`protocol.byte_prompt_ids`, chats as a `protocol.transcript`), exactly as those instances do,
so no `/tokenize` call precedes a request. Elsewhere (a checkpoint's tokenizer, vLLM's) the
tokenizer is the model's own, which the router cannot load (it imports no transformers: the
walls of docs/architecture.md), and it asks an instance: the first that answers, accepting
ones first; one that fails (5xx, no answer) is counted against (`serve.router.breaker`) and
the next asked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from prfaas.serve import protocol as p
from prfaas.serve.errors import (
    BadRequestError,
    InstanceFailedError,
    NoCapacityError,
    ServeError,
    from_response,
)
from prfaas.serve.router.attempts import judge
from prfaas.serve.router.instance_client import CallBroke, CallRefused, InstanceClient
from prfaas.serve.router.registry import Registry

_Result = TypeVar("_Result")


async def tokenize(
    client: InstanceClient, registry: Registry, text: str, *, add_special_tokens: bool = True
) -> list[int]:
    """The prompt's token ids, as the served model's tokenizer gives them; without special
    tokens and chat template when `add_special_tokens` is False."""
    if registry.byte_tokenizer():
        if not text:
            raise BadRequestError("the prompt is empty")
        return p.byte_prompt_ids(text, add_special_tokens=add_special_tokens)
    body = p.TokenizeRequest(text=text, add_special_tokens=add_special_tokens)
    result = await _ask_any(registry, "tokenize", lambda url: client.tokenize(url, body))
    return result.token_ids


async def tokenize_chat(
    client: InstanceClient, registry: Registry, chat: p.ChatPrompt
) -> list[int]:
    """The chat's prompt ids: the engine's chat template (an instance renders it), or the
    byte tokenizer's plain transcript, which has none of a template's switches to honour."""
    if not registry.byte_tokenizer():
        body = p.TokenizeRequest(chat=chat)
        result = await _ask_any(registry, "tokenize", lambda url: client.tokenize(url, body))
        return result.token_ids
    return p.byte_prompt_ids(p.plain_transcript(chat))


async def detokenize(client: InstanceClient, registry: Registry, token_ids: list[int]) -> str:
    """The text of `token_ids` (special tokens dropped)."""
    if registry.byte_tokenizer():
        return p.byte_text(token_ids)
    body = p.TokenizeResult(token_ids=token_ids)
    result = await _ask_any(registry, "detokenize", lambda url: client.detokenize(url, body))
    return result.text


async def _ask_any(
    registry: Registry, what: str, call: Callable[[str], Awaitable[_Result]]
) -> _Result:
    failure: ServeError = NoCapacityError("no instance is up")
    for inst in sorted(registry.healthy(), key=lambda i: not i.is_accepting):
        try:
            return await call(inst.spec.url)
        except CallBroke as err:
            failure = InstanceFailedError(str(await judge(registry, inst, what, err)))
        except CallRefused as err:
            if err.status_code < 500:
                raise from_response(err.status_code, err.body) from None
            failure = InstanceFailedError(f"/{what} on {inst.name}: {err.message}")
        registry.request_failed(inst.name)
    raise failure
