"""The router knows what an engine does with a chat that names no max_tokens from `/info` only
(`capabilities.chat_runs_to_context`), never from the deployment file's `backend` (issue 25,
point 5)."""

from __future__ import annotations

from serve_helpers import fake_info

from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Backend, default_deployment
from prfaas.serve.edge.openai_api import ChatCompletionRequest
from prfaas.serve.router import completions
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.registry import Registry


def _runtime(chat_runs_to_context: bool) -> RouterRuntime:
    """A torch deployment file whose instances say what their engine does in `/info`."""
    deployment = default_deployment()
    assert deployment.backend is Backend.TORCH
    client = HttpInstanceClient()
    registry = Registry(deployment, client)
    for inst in registry.instances.values():
        info = fake_info(inst.name, inst.role.value)
        said = p.CapabilitiesBody(chat_runs_to_context=chat_runs_to_context)
        inst.info = info.model_copy(update={"capabilities": said})
        inst.is_healthy = True
    return RouterRuntime(deployment, registry, RouterMetrics(), client)


def test_a_chats_default_max_tokens_follows_info_not_the_file() -> None:
    chat = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    prompt = [1] * 96
    to_context = completions._default_max_tokens(_runtime(True), chat, prompt)
    assert to_context == 4096 - 96  # fake_info's context
    assert completions._default_max_tokens(_runtime(False), chat, prompt) == 16
