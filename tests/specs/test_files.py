"""Our YAML formats: a user model file loads, and every malformed one says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.specs.catalog import get_model, model_names, resolve_model
from prfaas.specs.errors import SpecFileError, UnknownModelError

GOOD = """
name: tiny
hidden_size: 64
vocab_size: 100
mixers:
  - {type: gqa, num_layers: 1, num_q_heads: 4, num_kv_heads: 2, head_dim: 16}
  - {type: linear, kind: mamba2, num_layers: 3, num_heads: 2, num_key_heads: 1,
     key_head_dim: 4, value_head_dim: 8, conv_kernel: 4}
mlps:
  - {type: dense, num_layers: 4, intermediate_size: 128}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(text)
    return path


def test_user_yaml_loads(tmp_path: Path) -> None:
    spec = resolve_model(str(_write(tmp_path, GOOD)))
    assert spec.name == "tiny" and spec.num_layers == 4
    assert spec.kv_bytes_per_token() == 128


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("type: gqa", "type: gqq"), "unknown type 'gqq'"),
        (("head_dim: 16", "head_dim: 16, heads: 3"), "unknown key(s) heads"),
        (("num_kv_heads: 2", "num_kv_heads: -2"), "num_kv_heads must not be negative"),
        (("kind: mamba2", "kind: rnn"), "mixers[1]: kind"),
        (("hidden_size: 64\n", ""), "hidden_size: Field required"),
        (("intermediate_size: 128", "intermediate_size: lots"), "intermediate_size"),
        (("num_layers: 4", "num_layers: 5"), "4 mixer layers but 5 MLP layers"),
    ],
)
def test_malformed_model_yaml_names_the_problem(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    path = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(SpecFileError) as err:
        resolve_model(str(path))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecFileError, match="not valid YAML"):
        resolve_model(str(_write(tmp_path, "mixers: [")))
    with pytest.raises(SpecFileError, match="cannot read"):
        resolve_model(str(tmp_path / "absent.yaml"))


def test_unknown_catalog_model_lists_the_known_ones() -> None:
    with pytest.raises(UnknownModelError, match=r"known: .*qwen3-235b"):
        get_model("qwen9")


def test_catalog_has_table1_models_and_the_1t_model() -> None:
    assert {
        "kimi-linear-48b",
        "mimo-v2-flash",
        "qwen3.5-397b",
        "ring-2.5-1t",
        "minimax-m2.5",
        "qwen3-235b",
        "prfaas-1t",
    } <= set(model_names())
