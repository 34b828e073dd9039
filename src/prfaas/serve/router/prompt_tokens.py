"""A prompt's token ids, and ids back to text, for the router's endpoints.

The router encodes prompts itself wherever it can give exactly the ids an instance would, so
no `/tokenize` call precedes a request (`PromptTokenizer`):

    byte tokenizer    the instances say so (`/info` capabilities `byte_tokenizer`: emulated,
                      torch's random presets): `protocol.byte_prompt_ids`, chats as a
                      `protocol.plain_transcript`
    a checkpoint's    the instances encode with the model directory's tokenizer.json
                      (`tokenizer_from_model_dir`) and the router reads that directory (the
                      deployment file's `model`) as transformers would
                      (`serve.router.model_tokenizer`): the text encoded, or, where the
                      instances say a prompt is one user turn of the chat template
                      (`prompt_as_chat_turn`: torch on a checkpoint with one), that turn
                      rendered (`serve.router.chat_template`) and encoded without special
                      tokens; a chat is its plain transcript, encoded as a prompt

Otherwise it asks an instance: instances that encode otherwise (a GGUF, vLLM given a
`--tokenizer` of its own), a directory not readable here (a router pod that does not mount
the model), a tokenizer transformers would build differently, a chat the instance's engine
renders with its own conversation rules (`renders_chat`: vLLM's content formats, developer
role, kwargs filter), instances that disagree, a template that fails to render. The reason is
logged once per kind. The instance asked is a local one first (the PD cluster's, not a PrfaaS
instance across the WAN), accepting ones first; one that fails (5xx, no answer) is counted
against (`serve.router.breaker`) and the next asked. Detokenizing always asks an instance
(`/detokenize`: no request waits on it).

Local encoding runs in a worker thread: a 100K-token prompt takes tens of milliseconds
that the router's event loop must not stall on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment, InstanceRole
from prfaas.serve.errors import (
    BadRequestError,
    InstanceFailedError,
    NoCapacityError,
    ServeError,
    from_response,
)
from prfaas.serve.router.attempts import judge
from prfaas.serve.router.instance_client import CallBroke, CallRefused, InstanceClient
from prfaas.serve.router.model_tokenizer import (
    ModelTokenizer,
    TokenizerUnavailable,
    load_model_tokenizer,
)
from prfaas.serve.router.registry import LiveInstance, Registry

log = logging.getLogger("prfaas.tokenizer")
_Result = TypeVar("_Result")


class PromptTokenizer:
    """The router's tokenizer: its own where it can, an instance's where not (module doc).
    One per router (`RouterRuntime.prompts`); the model's tokenizer is read on first need."""

    def __init__(self, deployment: Deployment, client: InstanceClient, registry: Registry):
        self._model_dir = Path(deployment.model)
        self._client = client
        self._registry = registry
        self._loaded: ModelTokenizer | TokenizerUnavailable | None = None
        self._load_lock = asyncio.Lock()
        self._said: set[str] = set()  # the kinds of fallback already logged

    async def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """The prompt's token ids, as the served model's tokenizer gives them; without special
        tokens and chat template when `add_special_tokens` is False."""
        if not text:
            raise BadRequestError("the prompt is empty")
        if self._registry.byte_tokenizer():
            return p.byte_prompt_ids(text, add_special_tokens=add_special_tokens)
        if not self._registry.healthy():  # no instance has said how it encodes
            raise NoCapacityError("no instance is up")
        as_turn = self._registry.agreed(lambda c: c.prompt_as_chat_turn)
        if not self._registry.agreed(lambda c: c.tokenizer_from_model_dir):
            self._fall_back("dir", "the instances do not all encode with the model's directory")
        elif as_turn is None:
            self._fall_back("rule", "the instances disagree on prompt_as_chat_turn")
        else:
            ids = await self._local(
                lambda tok: tok.prompt_ids(
                    text, add_special_tokens=add_special_tokens, as_chat_turn=as_turn
                )
            )
            if ids is not None:
                return ids
        body = p.TokenizeRequest(text=text, add_special_tokens=add_special_tokens)
        return (await self._ask("tokenize", lambda url: self._client.tokenize(url, body))).token_ids

    async def encode_chat(self, chat: p.ChatPrompt) -> list[int]:
        """The chat's prompt ids: the byte tokenizer's or a checkpoint's plain transcript
        (which has none of a template's switches to honour: asking one is a 400), or the
        engine's own rendering (an instance renders it)."""
        if self._registry.byte_tokenizer():
            return p.byte_prompt_ids(p.plain_transcript(chat))
        if self._registry.agreed(lambda c: c.renders_chat) is False:
            return await self.encode(p.plain_transcript(chat))
        self._fall_back("chat", "the instances render chats with their engine's own rules")
        body = p.TokenizeRequest(chat=chat)
        return (await self._ask("tokenize", lambda url: self._client.tokenize(url, body))).token_ids

    async def decode(self, token_ids: list[int]) -> str:
        """The text of `token_ids` (special tokens dropped)."""
        if self._registry.byte_tokenizer():
            return p.byte_text(token_ids)
        body = p.TokenizeResult(token_ids=token_ids)
        result = await self._ask("detokenize", lambda url: self._client.detokenize(url, body))
        return result.text

    async def _local(self, work: Callable[[ModelTokenizer], list[int]]) -> list[int] | None:
        """`work` on the model's tokenizer in a worker thread; None when there is none to use
        or it fails (a template that refuses the prompt): an instance answers instead."""
        loaded = await self._model_tokenizer()
        if isinstance(loaded, TokenizerUnavailable):
            self._fall_back("load", f"cannot read the model's tokenizer: {loaded}")
            return None
        try:
            return await asyncio.to_thread(work, loaded)
        except Exception as err:  # a chat template's own error, whatever its type
            self._fall_back("render", f"the chat template failed ({type(err).__name__}: {err})")
            return None

    async def _model_tokenizer(self) -> ModelTokenizer | TokenizerUnavailable:
        async with self._load_lock:
            if self._loaded is None:
                self._loaded = await asyncio.to_thread(_load, self._model_dir)
            return self._loaded

    def _fall_back(self, kind: str, reason: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            log.warning("prfaas: the router asks an instance to tokenize: %s", reason)

    async def _ask(self, what: str, call: Callable[[str], Awaitable[_Result]]) -> _Result:
        failure: ServeError = NoCapacityError("no instance is up")
        for inst in sorted(self._registry.healthy(), key=_ask_order):
            try:
                return await call(inst.spec.url)
            except CallBroke as err:
                failure = InstanceFailedError(str(await judge(self._registry, inst, what, err)))
            except CallRefused as err:
                if err.status_code < 500:
                    raise from_response(err.status_code, err.body) from None
                failure = InstanceFailedError(f"/{what} on {inst.name}: {err.message}")
            self._registry.request_failed(inst.name)
        raise failure


def _load(directory: Path) -> ModelTokenizer | TokenizerUnavailable:
    try:
        return load_model_tokenizer(directory)
    except TokenizerUnavailable as err:
        return err


def _ask_order(inst: LiveInstance) -> tuple[bool, bool]:
    """Local before remote (a PrfaaS instance sits across the WAN), accepting first."""
    return inst.role is InstanceRole.PRFAAS_PREFILL, not inst.is_accepting
