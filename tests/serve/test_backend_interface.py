"""Each backend keeps its word: the optional verbs its `Capabilities` declare are there (the
shell reaches them through `interface.cached_prefix`, `prefix_mover` and `own_kv_links`, which
trust the declaration), and the shell's accessors refuse what a backend does not declare with
the typed `UnsupportedVerbError`. The torch backend is built on the tiny preset (CPU), the
emulated one from the test deployment; the vLLM one's class is checked here and its built
instances in test_vllm_arch.py."""

from __future__ import annotations

from typing import Any

import pytest
from serve_helpers import emulated_deployment

from prfaas.serve.backends import interface
from prfaas.serve.backends.emulated import EmulatedBackend
from prfaas.serve.backends.interface import Capabilities
from prfaas.serve.backends.vllm.backend import VllmBackend
from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.errors import UnsupportedVerbError

#: Each optional verb group, the capability that declares it and the shell's accessor.
OPTIONAL: list[tuple[str, type[Any], Any]] = [
    ("reports_cached_prefix", interface.CachedPrefix, interface.cached_prefix),
    ("moves_prefixes", interface.PrefixMover, interface.prefix_mover),
    ("ships_own_kv", interface.OwnKvLinks, interface.own_kv_links),
]


def _verbs(protocol: type[Any]) -> list[str]:
    return [name for name in vars(protocol) if not name.startswith("_")]


def _declared_verbs_are_there(kind: type[Any], said: Capabilities) -> None:
    for capability, protocol, _ in OPTIONAL:
        if getattr(said, capability):
            assert all(callable(getattr(kind, verb, None)) for verb in _verbs(protocol))


def test_the_emulated_backend_declares_nothing_optional_and_is_refused_it() -> None:
    """Nothing optional but its byte tokenizer, which the router encodes itself (and its
    prompt ids in the KV stream the shell ships)."""
    deployment = emulated_deployment()
    backend = EmulatedBackend(deployment, deployment.instance("pdd-0"))
    assert backend.info.capabilities == Capabilities(byte_tokenizer=True, prompt_in_kv_stream=True)
    with pytest.raises(UnsupportedVerbError, match="reports_cached_prefix"):
        interface.cached_prefix(backend)
    with pytest.raises(UnsupportedVerbError, match="moves_prefixes"):
        interface.prefix_mover(backend)
    assert interface.own_kv_links(backend) is None  # the shell's senders carry its KV


def test_the_torch_backend_has_every_verb_it_declares() -> None:
    pytest.importorskip("torch")
    from prfaas.serve.backends.torch import TorchBackend

    deployment = default_deployment()
    backend = TorchBackend(deployment, deployment.instance("pdd-0"))
    said = backend.info.capabilities
    assert said == Capabilities(
        moves_prefixes=True,
        reports_cached_prefix=True,
        computes_logprobs=True,
        byte_tokenizer=True,  # a random preset: the byte tokenizer
        prompt_in_kv_stream=True,
    )
    _declared_verbs_are_there(TorchBackend, said)
    assert interface.prefix_mover(backend) is backend
    assert interface.own_kv_links(backend) is None


def test_the_vllm_backend_class_has_every_verb_it_may_declare() -> None:
    """Its instances declare all three (`moves_prefixes` only for a dense model)."""
    everything = Capabilities(ships_own_kv=True, moves_prefixes=True, reports_cached_prefix=True)
    _declared_verbs_are_there(VllmBackend, everything)
