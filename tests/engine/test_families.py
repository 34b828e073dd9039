"""Every hybrid family on the engine, against transformers' own greedy `generate()`.

One tiny random-weight preset per family (fixed seed): Mamba/Mamba2 states (jamba, bamba,
granitemoehybrid, nemotron_h with MLP-only layers, mamba2), attention and Mamba2 in one layer
(falcon_h1), shared attention blocks (zamba, zamba2), short convolutions (lfm2), Gated
DeltaNet (olmo_hybrid), sliding windows (gemma3) and lightning attention (minimax). For a
45-token and a 600-token prompt, 16 greedy tokens must equal `generate(do_sample=False)`:
colocated, again after a prefix hit, disaggregated (export, bytes, import on a second engine)
and in a batch of four. Bit-exact transfer of the same exports over TCP is in
tests/transfer/test_engine_kv_round_trip.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest
from engine_helpers import hf_greedy, preset
from transformers import AutoConfig, AutoModelForCausalLM
from typer.testing import CliRunner

from prfaas.cli.app import app
from prfaas.engine import Engine, EngineConfig, ExportedPrefill, LoadedModel, SamplingParams
from prfaas.engine.batching import pads_unequal_lengths
from prfaas.engine.cache_layout import derive_cache_layout
from prfaas.engine.errors import ModelLoadError
from prfaas.engine.models import load_model
from prfaas.engine.tokenizer import BOS_ID
from prfaas.specs.hf_config import load_hf_config
from prfaas.specs.model import LinearAttention, MixerGroup

FAMILY_PRESETS = [
    "tiny-bamba",
    "tiny-falcon-h1",
    "tiny-gemma3",
    "tiny-granite-hybrid",
    "tiny-jamba",
    "tiny-lfm2",
    "tiny-mamba2",
    "tiny-minimax",
    "tiny-nemotron-h",
    "tiny-olmo-hybrid",
    "tiny-zamba",
    "tiny-zamba2",
]
CONFIG = EngineConfig(block_tokens=16, chunk_tokens=64, capacity_bytes=16 * 1024 * 1024)
GREEDY = SamplingParams(max_tokens=16)
_TEXT = (
    "The prefill cluster streams every layer's cache to the decode cluster across the link; "
    "hybrid models keep a fixed-size state per request beside the attention cache. "
)


def _prompt(num_tokens: int, salt: str = "") -> tuple[int, ...]:
    """BOS plus num_tokens - 1 bytes of deterministic text."""
    body = ((salt + _TEXT) * (num_tokens // len(_TEXT) + 2)).encode()
    return (BOS_ID, *body[: num_tokens - 1])


SHORT, LONG = _prompt(45), _prompt(600, "Long: ")


@functools.cache
def _reference(name: str, prompt: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(hf_greedy(preset(name), prompt, GREEDY.max_tokens))


def _tokens(engine: Engine, prompt: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    (completion,) = engine.generate([prompt], GREEDY)
    return completion.token_ids, completion.num_cached_tokens


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_colocated_and_after_a_prefix_hit(name: str) -> None:
    engine = Engine(preset(name), CONFIG)
    for prompt in (SHORT, LONG):
        tokens, cached = _tokens(engine, prompt)
        assert (tokens, cached) == (_reference(name, prompt), 0)
        again, cached = _tokens(engine, prompt)
        assert cached > 0
        assert again == _reference(name, prompt)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_disaggregated(name: str) -> None:
    model: LoadedModel = preset(name)
    for prompt in (SHORT, LONG):
        prefill, decode = Engine(model, CONFIG), Engine(model, CONFIG)
        exported = prefill.export_prefill("r", prompt, GREEDY, decode.cached_prefix_tokens(prompt))
        assert exported is not None
        decode.submit_import(ExportedPrefill.from_bytes(exported.to_bytes()), GREEDY)
        (completion,) = decode.run()
        assert completion.token_ids == _reference(name, prompt)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_a_batch_of_four(name: str) -> None:
    prompts = [SHORT, LONG, _prompt(100, "Batched: "), _prompt(23, "Tiny: ")]
    completions = Engine(preset(name), CONFIG).generate(prompts, GREEDY)
    for prompt, completion in zip(prompts, completions, strict=True):
        assert completion.token_ids == _reference(name, prompt)


@pytest.mark.parametrize("name", FAMILY_PRESETS)
def test_the_config_alone_gives_the_pool_groups_and_kv_throughput(
    name: str, tmp_path: Path
) -> None:
    """`config.json` (what `kv-throughput --model DIR` reads) gives the groups the engine
    derives from the running model, up to the dtype the model runs in (fp32 here)."""
    model = preset(name)
    model.model.config.save_pretrained(tmp_path)
    from_config = load_hf_config(tmp_path)
    layout = derive_cache_layout(model.model, name, 16)
    as_fp32 = [_fp32(group) for group in from_config.mixers]
    assert as_fp32 == list(layout.spec.mixers)
    assert from_config.num_layers == layout.num_layers
    args = ["kv-throughput", "--model", str(tmp_path), "--lengths", "32768", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["kv_bytes"] == from_config.cache_bytes(32768) > 0


def _fp32(group: MixerGroup) -> MixerGroup:
    if isinstance(group, LinearAttention):
        conv = 4 if group.conv_kernel else group.conv_dtype_bytes  # no conv: no conv dtype
        return dataclasses.replace(group, state_dtype_bytes=4, conv_dtype_bytes=conv)
    return dataclasses.replace(group, kv_dtype_bytes=4)


def test_a_family_without_a_cache_layout_is_refused_from_its_config(tmp_path: Path) -> None:
    """RWKV keeps a state the specs have no reader for: refused with the reason. The directory
    holds config.json and no weights, so a refusal after loading weights could not happen."""
    AutoConfig.for_model(
        "rwkv", vocab_size=259, hidden_size=64, num_hidden_layers=2
    ).save_pretrained(tmp_path)
    with pytest.raises(
        ModelLoadError, match=r"cannot serve this model: unsupported model_type 'rwkv'"
    ):
        load_model(str(tmp_path))


def test_only_a_model_that_masks_a_padded_batch_wrongly_batches_by_length() -> None:
    """MiniMax with a lightning layer first (its own order) attends to left pads: the probe
    says so, and its batch of four above still equals `generate()`. The same model with
    softmax first, and every other family, batches unequal lengths together."""
    lightning_first = preset("tiny-minimax")
    layout = derive_cache_layout(lightning_first.model, "tiny-minimax", 16)
    assert not pads_unequal_lengths(lightning_first.model, layout)
    config = lightning_first.model.config
    rotated = config.layer_types[1:] + config.layer_types[:1]
    softmax_first = dict(config.to_dict(), layer_types=rotated)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**softmax_first)).eval()
    assert pads_unequal_lengths(model, derive_cache_layout(model, "softmax-first", 16))
    for name in FAMILY_PRESETS:
        if name != "tiny-minimax":
            other = preset(name).model
            assert pads_unequal_lengths(other, derive_cache_layout(other, name, 16)), name
