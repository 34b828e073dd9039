"""The child's OpenAI API as the `vllm` backend speaks it: request fields, answers, errors.

`serve.backends.vllm.backend` sends prfaas's sampling as vLLM's fields (`vllm_sampling`), a
cache move's two one-token requests (`move_send_request`, `move_load_request`), reads the
child's choices and logprobs back as prfaas's (`choices`, `logprobs`), its `/metrics` page
(`gauges`), and its errors as prfaas's (`child_error`: 4xx keep their meaning).
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
from tokenizers import Tokenizer

from prfaas.serve import protocol as p
from prfaas.serve.errors import BadRequestError, InstanceFailedError


def gauges(text: str) -> dict[str, float]:
    """`name{labels} value` lines of a Prometheus text page, summed over labels."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        value = rest.rsplit(" ", 1)[-1]
        with contextlib.suppress(ValueError):
            values[name.strip()] = values.get(name.strip(), 0.0) + float(value)
    return values


def vllm_sampling(sampling: p.Sampling, max_tokens: int, *, stop: bool) -> dict[str, Any]:
    """vLLM's sampling fields; `stop`: whether the child checks the stop strings."""
    fields: dict[str, Any] = {
        "max_tokens": max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k if sampling.top_k > 0 else -1,
        "seed": sampling.seed,
        "stop": sampling.stop if stop else [],
        "ignore_eos": sampling.ignore_eos,
        "return_token_ids": True,
    }
    for name in sampling.engine_defaults:  # the model's generation_config decides
        del fields[name]
    if sampling.logprobs is not None:  # keyed "token_id:N": ids, not texts that collide
        fields.update(logprobs=sampling.logprobs, return_tokens_as_token_ids=True)
    return fields


def choices(event: Any) -> list[dict[str, Any]]:
    """The choices of one event of the child's completion stream; its error event (vLLM's
    `{"error": {...}}`, or its older `{"object": "error", ...}`) as `InstanceFailedError`."""
    if not isinstance(event, dict) or "choices" not in event:
        error = event.get("error", event) if isinstance(event, dict) else event
        message = error.get("message", error) if isinstance(error, dict) else error
        raise InstanceFailedError(f"vLLM failed mid-stream: {str(message)[:200]}")
    return list(event["choices"])


def child_error(response: httpx.Response) -> Exception:
    """The child's error as ours: 4xx keep their meaning, anything else failed upstream."""
    try:
        message = str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = response.text[:200]
    if 400 <= response.status_code < 500:
        return BadRequestError(f"vLLM: {message}")
    return InstanceFailedError(f"vLLM answered {response.status_code}: {message}")


def logprobs(
    choice: dict[str, Any], num_top: int | None, tokenizer: Tokenizer
) -> list[p.Logprob | None]:
    """A choice's per-token logprobs (vLLM's completions shape, token ids as keys) as
    ours, named with the model's tokenizer; Nones when none were asked for."""
    raw = choice.get("logprobs")
    count = len(choice.get("token_ids") or [])
    if num_top is None or not raw:
        return [None] * count

    def named(key: str, value: float) -> p.TopLogprob:
        token_id = int(key.removeprefix("token_id:"))
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        return p.TopLogprob(token_id=token_id, token=text, bytes=list(text.encode()), logprob=value)

    out: list[p.Logprob | None] = []
    for key, value, top in zip(
        raw["tokens"], raw["token_logprobs"], raw["top_logprobs"], strict=True
    ):
        best = sorted(top.items(), key=lambda item: -item[1])[:num_top]
        out.append(p.Logprob(**named(key, value).model_dump(), top=[named(k, v) for k, v in best]))
    return out


def move_send_request(model: str, body: p.PrefixSendRequest, k: int) -> dict[str, Any]:
    """The holder's half of a cache move of k tokens: a one-token prefill of the first k - 1
    whose connector ships every block to the target, paced as the link ("move")."""
    send = {
        "transfer_id": body.move_id,
        "host": body.target_transfer_host,
        "port": body.target_transfer_port,
        "from_token": 0,
        "move": True,
    }
    return {
        "model": model,
        "prompt": body.token_ids[: k - 1],
        "max_tokens": 1,
        "temperature": 0.0,
        "kv_transfer_params": {"prfaas_send": send},
    }


def move_load_request(model: str, body: p.PrefixImportRequest) -> dict[str, Any]:
    """The target's half: a one-token request for the prefix whose connector loads the move."""
    return {
        "model": model,
        "prompt": body.token_ids,
        "max_tokens": 1,
        "temperature": 0.0,
        "kv_transfer_params": {"prfaas_recv": {"transfer_id": body.move_id}},
    }
