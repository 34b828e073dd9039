"""The planner sizes memory by the start-up rule of the engine the timing choice names (issue
30, `specs.memory.startup_rule`): the scenario's clusters and every searched shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfaas.planner.model import Cluster
from prfaas.planner.parallel import cluster_shapes
from prfaas.planner.scenario import load_scenario
from prfaas.specs import aic
from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.memory import sglang_mem_fraction_static
from prfaas.specs.timing import (
    AicEngine,
    TimingChoice,
    TimingSource,
    default_parallelism,
    time_instance,
)

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def _scenario(tmp_path: Path, timing: str) -> Path:
    path = tmp_path / "dense-70b.yaml"
    path.write_text(DENSE_70B.read_text() + f"timing: {timing}\n")
    return path


def test_a_scenario_under_sglang_gets_sglangs_kv_budget(tmp_path: Path) -> None:
    # Whoever times the H20 cluster (aiconfigurator has no H20 data: the roofline), SGLang
    # would serve it, so SGLang's start-up rule sizes its memory.
    scenario = load_scenario(str(_scenario(tmp_path, "{source: aic, engine: sglang}")))
    for cluster in (scenario.hardware.prfaas, scenario.hardware.pd):
        memory = cluster.memory
        assert memory is not None
        chip = cluster.profile.chip
        fraction = sglang_mem_fraction_static(chip.hbm_bytes, 8)
        assert memory.usable_bytes == pytest.approx(fraction * 8 * chip.hbm_bytes)
        assert memory.kv_capacity_bytes == pytest.approx(
            memory.usable_bytes - get_model("llama-3.1-70b").weight_bytes()
        )
        assert f"SGLang mem_fraction_static {fraction:.3f}" == memory.rule


def test_the_roofline_keeps_the_default_rule(tmp_path: Path) -> None:
    scenario = load_scenario(str(_scenario(tmp_path, "{source: roofline}")))
    memory = scenario.hardware.pd.memory
    assert memory is not None and memory.rule == "90% of HBM"


@pytest.mark.skipif(aic.aic_version() is None, reason="aiconfigurator-core not installed")
def test_the_search_drops_shapes_sglang_would_not_start() -> None:
    # Qwen3.5-397B with attention DP8 on 8 x H200: eight attention copies (917 GB) beside
    # SGLang's DP-attention padding do not fit (0.753 of HBM); vLLM's 0.92 fits them.
    spec, chip = get_model("qwen3.5-397b"), get_chip("h200")

    def dp8_shapes(engine: AicEngine) -> list[str]:
        choice = TimingChoice(TimingSource.AIC, engine)
        profile = time_instance(spec, chip, default_parallelism(spec, 8), choice).profile
        shapes, _ = cluster_shapes(Cluster(profile, 8), choice)
        return [s.profile.source for s in shapes if "dp8" in s.profile.source]

    assert dp8_shapes(AicEngine.SGLANG) == []
    assert dp8_shapes(AicEngine.VLLM) != []
