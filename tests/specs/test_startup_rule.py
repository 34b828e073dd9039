"""The memory an engine gives an instance at start-up (issue 30, `specs.memory.StartupRule`):
SGLang's `mem_fraction_static` rule by GPU memory and TP size, vLLM's and TensorRT-LLM's
fractions, and the fit of the four configurations aiconfigurator refused as OOM."""

from __future__ import annotations

import pytest

from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.memory import (
    DEFAULT_RULE,
    InstanceMemory,
    StartupRule,
    expert_weight_bytes,
    instance_memory,
    sglang_mem_fraction_static,
    startup_rule,
)
from prfaas.specs.perf import RooflineProfile
from prfaas.specs.timing import AicEngine, Parallelism, TimingChoice, TimingSource

SGLANG = startup_rule(TimingChoice(TimingSource.AIC, AicEngine.SGLANG))


@pytest.mark.parametrize(
    ("hbm_bytes", "tp", "dp", "fraction"),
    [
        # 24 GB (22,888 MiB, the < 35 GiB tier: chunk 2,048, graph batch 24 below TP4):
        # reserved 512 + 3,072 + 48 + 128 = 3,760 MiB.
        (24e9, 1, 1, 0.836),
        # H200, 141 GB (134,465 MiB; chunk 8,192, graph batch 256 / 512 from TP4):
        # TP1 reserves 512 + 12,288 + 512 + 128 = 13,440 MiB; TP8 512 + 12,288 + 1,024 + 1,024.
        (141e9, 1, 1, 0.900),
        (141e9, 8, 1, 0.890),
        # ... with DP attention over 8 ranks, + 512 x 8 x (3 + 1.5) = 18,432 MiB of padding.
        (141e9, 8, 8, 0.753),
        # B200, 180 GB (171,661 MiB, the >= 160 GiB tier: chunk 16,384, graph batch 512).
        (180e9, 1, 1, 0.847),
        (180e9, 8, 1, 0.842),
        (180e9, 8, 8, 0.735),
        # An 80 GB H100 (76,294 MiB) at TP1 reserves 13,440 MiB, above the 10 GiB floor.
        (80e9, 1, 1, 0.824),
        # A 16 GB GPU (15,259 MiB, < 20 GiB: chunk 2,048, graph batch 8), no 10 GiB floor:
        # reserved 512 + 3,072 + 16 + 128 = 3,728 MiB.
        (16e9, 1, 1, 0.756),
    ],
)
def test_sglang_mem_fraction_static_by_gpu_memory_and_tp(
    hbm_bytes: float, tp: int, dp: int, fraction: float
) -> None:
    assert sglang_mem_fraction_static(hbm_bytes, tp, dp) == fraction


def test_the_rule_is_aiconfigurators_copy_where_it_is_installed() -> None:
    sglang = pytest.importorskip("aiconfigurator_core.sdk.backends.sglang_backend")
    for gb in (16, 24, 40, 48, 80, 96, 141, 180, 192, 288):
        for tp in (1, 2, 4, 8):
            for dp in (1, 2, 4, 8):
                theirs = sglang.derive_sglang_mem_fraction_static(gb * 10**9, tp, 1, dp)
                assert sglang_mem_fraction_static(gb * 1e9, tp, dp) == theirs, (gb, tp, dp)


def test_the_timing_choice_names_the_rule() -> None:
    assert startup_rule(TimingChoice()) is DEFAULT_RULE
    assert startup_rule(TimingChoice(TimingSource.MEASURED)) is DEFAULT_RULE
    assert SGLANG.engine is AicEngine.SGLANG
    vllm = startup_rule(TimingChoice(TimingSource.AIC, AicEngine.VLLM))
    trtllm = startup_rule(TimingChoice(TimingSource.AIC, AicEngine.TRTLLM))
    assert (vllm.fraction, trtllm.fraction) == (0.92, 0.9)


def _memory(model: str, chip: str, split: Parallelism, rule: StartupRule) -> InstanceMemory:
    profile = RooflineProfile(get_model(model), get_chip(chip), split.num_gpus)
    return instance_memory(profile, split.dp, rule)


def test_each_engine_sizes_the_kv_as_it_does_at_start_up() -> None:
    split, hbm = Parallelism(8, 8), 8 * 180e9
    weights = get_model("qwen3-235b").weight_bytes()
    sglang = _memory("qwen3-235b", "b200", split, SGLANG)
    assert sglang.kv_capacity_bytes == pytest.approx(0.842 * hbm - weights)
    assert sglang.activation_bytes == 0.0  # in SGLang's reserve
    default = _memory("qwen3-235b", "b200", split, DEFAULT_RULE)
    vllm = _memory(
        "qwen3-235b", "b200", split, startup_rule(TimingChoice(TimingSource.AIC, AicEngine.VLLM))
    )
    assert vllm.kv_capacity_bytes == pytest.approx(
        default.kv_capacity_bytes + (0.92 - 0.9) * hbm  # type: ignore[operator]
    )
    trtllm = _memory(
        "qwen3-235b",
        "b200",
        split,
        startup_rule(TimingChoice(TimingSource.AIC, AicEngine.TRTLLM)),
    )
    left = hbm - weights - default.activation_bytes
    assert trtllm.kv_capacity_bytes == pytest.approx(0.9 * left)


def test_dense_dp_ranks_are_sglang_replicas_and_moe_dp_ranks_dp_attention() -> None:
    # Llama-3.1-70B as tp1 dp4: four --tp 1 replicas, no DP-attention padding (0.847 on B200).
    dense = _memory("llama-3.1-70b", "b200", Parallelism(1, 1, 4), SGLANG)
    assert dense.usable_bytes == pytest.approx(0.847 * 4 * 180e9)
    # Qwen3-235B as tp1 ep8 dp8: one --tp 8 server with DP attention over 8 ranks (0.735).
    moe = _memory("qwen3-235b", "b200", Parallelism(1, 8, 8), SGLANG)
    assert moe.usable_bytes == pytest.approx(0.735 * 8 * 180e9)
    assert "mem_fraction_static 0.735" in moe.rule


@pytest.mark.parametrize(
    ("model", "chip", "split", "fits"),
    [
        ("llama-3.1-70b", "b200", Parallelism(1, 1, 4), True),  # 11 GB of KV per replica
        ("qwen3-235b", "b200", Parallelism(1, 4, 4), True),
        ("qwen3-235b", "b200", Parallelism(1, 8, 8), True),
        ("qwen3.5-397b", "b200", Parallelism(1, 8, 8), True),
        ("qwen3.5-397b", "h200", Parallelism(1, 8, 8), False),  # 8 attention copies on 141 GB
    ],
)
def test_the_configurations_aiconfigurator_refused_under_sglangs_rule(
    model: str, chip: str, split: Parallelism, fits: bool
) -> None:
    memory = _memory(model, chip, split, SGLANG)
    assert (memory.shortfall_bytes == 0) is fits
    # The default rule (90% of HBM less our workspace) admitted all five.
    assert _memory(model, chip, split, DEFAULT_RULE).shortfall_bytes == 0
    if not fits:
        warning = memory.fit_warning()
        assert warning is not None and "SGLang mem_fraction_static 0.753" in warning


def test_dp_ranks_copy_all_but_the_experts_under_every_rule() -> None:
    model = get_model("qwen3.5-397b")
    experts = expert_weight_bytes(model)
    memory = _memory("qwen3.5-397b", "b200", Parallelism(1, 8, 8), SGLANG)
    assert memory.weight_bytes == experts + 8 * (model.weight_bytes() - experts)
