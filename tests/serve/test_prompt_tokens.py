"""Where the router's prompt ids come from (`serve.router.prompt_tokens.PromptTokenizer`):
its own reading of the checkpoint's tokenizer when it can guarantee the instance's ids (no
call), else an instance's `/tokenize`, a local one first (the PD cluster's, not the PrfaaS
instance across the WAN, whatever the file order), never one marked down; the reason it
asks is logged once."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from fake_instances import FakeInstanceClient, fake_deployment
from serve_helpers import fake_info

from prfaas.integrations.vllm.tiny import save_byte_tokenizer
from prfaas.serve import protocol as p
from prfaas.serve.router.flow import RouterRuntime
from prfaas.serve.router.metrics import RouterMetrics
from prfaas.serve.router.model_tokenizer import load_model_tokenizer
from prfaas.serve.router.registry import Registry

REFUSING = "{{ raise_exception('no completions here') }}"


def _checkpoint(directory: Path, chat_template: str | None = None) -> Path:
    """A checkpoint directory's tokenizer files (the vLLM test checkpoints')."""
    directory.mkdir(exist_ok=True)
    save_byte_tokenizer(directory)
    if chat_template is not None:
        path = directory / "tokenizer_config.json"
        config = json.loads(path.read_text())
        path.write_text(json.dumps({**config, "chat_template": chat_template}))
    return directory


def _runtime(
    model: Path, *, as_chat_turn: bool = False, renders_chat: bool = False
) -> tuple[RouterRuntime, FakeInstanceClient]:
    """Every instance up and declaring the capabilities of a checkpoint's backend (no byte
    tokenizer); the deployment's `model` is `model`."""
    deployment = fake_deployment().model_copy(update={"model": str(model)})
    fake = FakeInstanceClient(deployment)
    registry = Registry(deployment, fake)
    said = p.CapabilitiesBody(
        prompt_as_chat_turn=as_chat_turn, renders_chat=renders_chat, tokenizer_from_model_dir=True
    )
    for inst in registry.instances.values():
        info = fake_info(inst.name, inst.role.value)
        inst.info, inst.is_healthy = info.model_copy(update={"capabilities": said}), True
    return RouterRuntime(deployment, registry, RouterMetrics(), fake), fake


def _asked(fake: FakeInstanceClient, rt: RouterRuntime) -> list[str]:
    names = {s.url: s.name for s in rt.deployment.instances}
    return [names[c.url] for c in fake.calls if c.endpoint == "/tokenize"]


@pytest.mark.parametrize("as_chat_turn", [False, True])
def test_a_readable_checkpoint_is_encoded_without_a_call(
    tmp_path: Path, as_chat_turn: bool
) -> None:
    model = _checkpoint(tmp_path / "ckpt")
    rt, fake = _runtime(model, as_chat_turn=as_chat_turn)
    ids = asyncio.run(rt.prompts.encode("hello <eos>"))
    tok = load_model_tokenizer(model)
    assert ids == tok.prompt_ids("hello <eos>", add_special_tokens=True, as_chat_turn=as_chat_turn)
    chat = p.ChatPrompt.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    assert asyncio.run(rt.prompts.encode_chat(chat)) == tok.prompt_ids(
        p.plain_transcript(chat), add_special_tokens=True, as_chat_turn=as_chat_turn
    )
    assert fake.calls == []


def test_an_unreadable_directory_asks_a_local_instance_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The router pod of a Kubernetes deployment that does not mount the model: it asks, a PD
    instance (prfaas-0 comes first in the file, across the WAN)."""
    rt, fake = _runtime(tmp_path / "not-mounted")
    with caplog.at_level(logging.WARNING, logger="prfaas.tokenizer"):
        for _ in range(2):
            assert asyncio.run(rt.prompts.encode("hi")) == p.byte_prompt_ids("hi")
    assert _asked(fake, rt) == ["pdp-0", "pdp-0"]
    (record,) = caplog.records
    assert "tokenizer.json is not readable here" in record.getMessage()


def test_the_fallback_skips_instances_marked_down_and_reaches_the_wan_last(tmp_path: Path) -> None:
    rt, fake = _runtime(tmp_path / "not-mounted")
    rt.registry.mark_failed("pdp-0")
    asyncio.run(rt.prompts.encode("a"))
    rt.registry.mark_failed("pdd-0")
    asyncio.run(rt.prompts.encode("b"))
    assert _asked(fake, rt) == ["pdd-0", "prfaas-0"]


def test_a_template_that_refuses_the_prompt_falls_back_to_the_instance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt, fake = _runtime(_checkpoint(tmp_path / "ckpt", REFUSING), as_chat_turn=True)
    with caplog.at_level(logging.WARNING, logger="prfaas.tokenizer"):
        asyncio.run(rt.prompts.encode("x"))
        asyncio.run(rt.prompts.encode("y"))
    assert _asked(fake, rt) == ["pdp-0", "pdp-0"]
    (record,) = caplog.records
    assert "no completions here" in record.getMessage()


def test_an_engine_that_renders_chats_itself_is_asked_for_chats_only(tmp_path: Path) -> None:
    """vLLM's instances render a chat with vLLM's own conversation rules: the router asks for
    chats and encodes completion prompts itself."""
    rt, fake = _runtime(_checkpoint(tmp_path / "ckpt"), renders_chat=True)
    chat = p.ChatPrompt.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    asyncio.run(rt.prompts.encode_chat(chat))
    asyncio.run(rt.prompts.encode("plain"))
    assert _asked(fake, rt) == ["pdp-0"]


def test_instances_that_disagree_on_the_prompt_rule_are_asked(tmp_path: Path) -> None:
    rt, fake = _runtime(_checkpoint(tmp_path / "ckpt"))
    info = rt.registry.instances["pdd-0"].info
    assert info is not None
    turned = info.capabilities.model_copy(update={"prompt_as_chat_turn": True})
    rt.registry.instances["pdd-0"].info = info.model_copy(update={"capabilities": turned})
    asyncio.run(rt.prompts.encode("x"))
    assert _asked(fake, rt) == ["pdp-0"]


def test_an_empty_prompt_is_a_400_before_any_call(tmp_path: Path) -> None:
    rt, fake = _runtime(tmp_path / "not-mounted")
    with pytest.raises(Exception, match="the prompt is empty") as raised:
        asyncio.run(rt.prompts.encode(""))
    assert getattr(raised.value, "status_code", None) == 400
    assert fake.calls == []


def test_with_no_instance_up_nothing_is_read_and_it_is_a_503(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before any instance has said how it encodes, the router neither guesses nor logs."""
    rt, fake = _runtime(_checkpoint(tmp_path / "ckpt"))
    for inst in rt.registry.instances.values():
        inst.is_healthy = False
    with (
        caplog.at_level(logging.WARNING, logger="prfaas.tokenizer"),
        pytest.raises(Exception, match="no instance is up") as raised,
    ):
        asyncio.run(rt.prompts.encode("x"))
    assert getattr(raised.value, "status_code", None) == 503
    assert caplog.records == [] and fake.calls == []


def test_instances_that_encode_otherwise_are_asked(tmp_path: Path) -> None:
    """A readable directory is not enough: vLLM given a `--tokenizer` of its own (or a GGUF
    on torch) says `tokenizer_from_model_dir: false`."""
    rt, fake = _runtime(_checkpoint(tmp_path / "ckpt"))
    info = rt.registry.instances["pdd-0"].info
    assert info is not None
    other = info.capabilities.model_copy(update={"tokenizer_from_model_dir": False})
    rt.registry.instances["pdd-0"].info = info.model_copy(update={"capabilities": other})
    asyncio.run(rt.prompts.encode("x"))
    assert _asked(fake, rt) == ["pdp-0"]
