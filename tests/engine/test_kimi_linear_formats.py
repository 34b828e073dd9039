"""Both `kimi_linear` config formats (issue 27): the Hub checkpoint's `linear_attn_config` and
transformers' own `KimiLinearConfig` fields (`layer_types`, `mlp_layer_types`, `linear_*`) are
read alike by kv-throughput, plan and generate."""

from __future__ import annotations

import json
from pathlib import Path

from engine_helpers import preset
from transformers import AutoConfig, AutoModelForCausalLM
from typer.testing import CliRunner

from prfaas.cli.app import app
from prfaas.engine.tokenizer import save_byte_tokenizer
from prfaas.specs.hf_config import load_hf_config

FIXTURES = Path(__file__).parents[1] / "fixtures" / "hf_configs"


def _transformers_format_checkpoint(directory: Path) -> None:
    """The tiny preset saved as transformers writes a KimiLinearConfig built from its own
    fields: no `linear_attn_config`, no `first_k_dense_replace`."""
    raw = preset("tiny-kimi-linear").model.config.to_dict()
    for hub_only in ("linear_attn_config", "first_k_dense_replace"):
        raw.pop(hub_only, None)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(**raw)).save_pretrained(directory)
    saved = json.loads((directory / "config.json").read_text())
    assert "linear_attn_config" not in saved and "layer_types" in saved
    save_byte_tokenizer(directory)


def test_generate_serves_a_transformers_format_checkpoint(tmp_path: Path) -> None:
    _transformers_format_checkpoint(tmp_path)
    args = ["generate", "--model", str(tmp_path), "--prompt", "Hi", "--max-tokens", "4", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert 1 <= len(json.loads(result.stdout)["token_ids"]) <= 4


def test_kv_throughput_and_plan_read_both_formats(tmp_path: Path) -> None:
    hub = load_hf_config(FIXTURES / "kimi-linear-48b.json")
    native = load_hf_config(FIXTURES / "kimi-linear-48b-transformers.json")
    assert (native.mixers, native.mlps) == (hub.mixers, hub.mlps)
    path = str(FIXTURES / "kimi-linear-48b-transformers.json")
    kv = CliRunner().invoke(app, ["kv-throughput", "--model", path, "--lengths", "8192", "--json"])
    assert kv.exit_code == 0, kv.output
    assert json.loads(kv.output)[0]["kv_bytes"] == hub.cache_bytes(8192)
    scenario = tmp_path / "kimi.yaml"
    scenario.write_text(
        f"name: kimi\nmodel: {path}\nprfaas: {{chip: h200, num_gpus: 8, gpus_per_instance: 8}}\n"
        "pd: {chip: h20, num_gpus: 16, gpus_per_instance: 8}\nlink_gbps: 100\n"
        "decode: {slo_tokens_per_s: 40}\nworkload:\n"
        "  input: {lognormal: {mu: 9.9, sigma: 1.0, min_tokens: 128, max_tokens: 128K}}\n"
        "  output: {fixed_tokens: 1024}\n"
    )
    plan = CliRunner().invoke(app, ["plan", "--scenario", str(scenario), "--json"])
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["prfaas_pd"]["lambda_max"] > 0
