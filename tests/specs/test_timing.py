"""Timing sources (issue 30): each source selected and reported, and the one fallback line when
the chosen source cannot time an instance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prfaas.planner.scenario import load_scenario
from prfaas.specs import aic
from prfaas.specs.catalog import get_chip, get_model
from prfaas.specs.timing import (
    AicEngine,
    Parallelism,
    TimingChoice,
    TimingSource,
    default_parallelism,
    instance_splits,
    parallelism_choices,
    time_instance,
)
from shared_specs import needs_aic

DENSE_70B = Path(__file__).parents[1] / "sim" / "data" / "dense-70b.yaml"


def _timed(model: str, chip: str, choice: TimingChoice, gpus: int = 8):  # type: ignore[no-untyped-def]
    spec = get_model(model)
    return time_instance(spec, get_chip(chip), default_parallelism(spec, gpus), choice)


def test_roofline_is_the_default_and_keeps_the_catalogs_measured_points() -> None:
    assert TimingChoice().source is TimingSource.ROOFLINE
    assert _timed("llama-3.1-70b", "h200", TimingChoice()).profile.source == "roofline"
    case_study = _timed("prfaas-1t", "h200", TimingChoice())
    assert case_study.profile.source == "measured (arXiv 2604.15039 Table 5)"
    assert case_study.fallback is None


def test_measured_falls_back_to_the_roofline_with_one_line() -> None:
    choice = TimingChoice(TimingSource.MEASURED)
    assert _timed("prfaas-1t", "h20", choice).fallback is None
    timed = _timed("llama-3.1-70b", "h200", choice)
    assert timed.profile.source == "roofline"
    assert timed.fallback == (
        "timing: no measured profile for llama-3.1-70b on 8 x h200; timed by the roofline"
    )


def test_aic_without_the_extra_falls_back_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aic, "aic_version", lambda: None)
    timed = _timed("llama-3.1-70b", "h200", TimingChoice(TimingSource.AIC))
    assert timed.profile.source == "roofline"
    assert timed.fallback is not None
    assert "aiconfigurator-core is not installed" in timed.fallback


@needs_aic
@pytest.mark.parametrize("engine", list(AicEngine))
def test_aic_times_covered_models_with_the_chosen_engines_data(engine: AicEngine) -> None:
    timed = _timed("llama-3.1-70b", "h200", TimingChoice(TimingSource.AIC, engine))
    assert timed.fallback is None
    source = timed.profile.source
    assert source.startswith(f"aiconfigurator {aic.aic_version()} ({engine} ")
    assert "h200_sxm, tp8" in source
    short, long = timed.profile.prefill_s(1024), timed.profile.prefill_s(32_768)
    assert 0 < short < long
    assert timed.profile.decode_step_s(1, 8000) < timed.profile.decode_step_s(64, 8000)


@needs_aic
@pytest.mark.parametrize(
    ("model", "chip", "reason"),
    [
        ("llama-3.1-70b", "h20", "it has no data for h20"),
        ("prfaas-1t", "h200", "it does not model prfaas-1t"),
        ("kimi-linear-48b", "h200", "it does not model kimi-linear-48b"),
    ],
)
def test_aic_falls_back_for_chips_and_models_it_lacks(model: str, chip: str, reason: str) -> None:
    timed = _timed(model, chip, TimingChoice(TimingSource.AIC))
    assert timed.fallback == (
        f"timing: aiconfigurator (sglang) cannot time {model} on 8 x {chip}: {reason}; "
        "timed by the default (roofline) source instead"
    )
    assert not timed.profile.source.startswith("aiconfigurator")


@needs_aic
def test_aic_times_expert_and_attention_data_parallel_splits_apart() -> None:
    spec, chip, choice = get_model("qwen3-235b"), get_chip("h200"), TimingChoice(TimingSource.AIC)
    splits = [Parallelism(8, 8), Parallelism(8, 1), Parallelism(1, 8, 8)]
    times = {time_instance(spec, chip, p, choice).profile.prefill_s(8192) for p in splits}
    assert len(times) == 3


@pytest.mark.parametrize("source", [TimingSource.ROOFLINE, TimingSource.MEASURED])
@pytest.mark.parametrize("model", ["qwen3-235b", "llama-3.1-70b"])
def test_gpu_count_sources_offer_the_default_split_only(model: str, source: TimingSource) -> None:
    # The roofline and the measured points time a GPU count, not a split: they offer one.
    spec, chip = get_model(model), get_chip("h200")
    for gpus in (1, 2, 4, 8):
        offered = parallelism_choices(spec, chip, gpus, TimingChoice(source))
        assert offered == [default_parallelism(spec, gpus)]


@needs_aic
def test_aic_offers_every_split_it_compiles() -> None:
    # Every tp x dp attention split times every ep x expert-TP expert split of 8 GPUs: 16 for
    # an MoE model, aiconfigurator's attention DP with expert TP (tp1 dp8, moe_tp 8) among them.
    spec, chip = get_model("qwen3.5-397b"), get_chip("h200")
    offered = parallelism_choices(spec, chip, 8, TimingChoice(TimingSource.AIC))
    assert offered[0] == default_parallelism(spec, 8)
    assert sorted(offered) == sorted(instance_splits(spec, 8))
    assert len(offered) == 16
    assert Parallelism(tp=1, ep=1, dp=8) in offered  # moe_tp 8: attention DP, expert TP
    assert Parallelism(tp=1, ep=2, dp=8) in offered  # tp1 dp8 etp4 ep2
    assert Parallelism(tp=4, ep=1, dp=2) in offered  # tp4 dp2 etp8
    # A dense model has no experts to split: the attention splits only.
    dense = get_model("llama-3.1-70b")
    assert len(parallelism_choices(dense, chip, 8, TimingChoice(TimingSource.AIC))) == 4


@needs_aic
def test_aic_falls_back_where_it_compiles_but_has_no_data() -> None:
    # An fp8 model on a chip without fp8 FLOPS: aiconfigurator compiles it and raises only
    # when asked for a time (once a traceback out of `prfaas plan`); now one line.
    timed = _timed("mimo-v2-flash", "a100", TimingChoice(TimingSource.AIC))
    assert timed.fallback is not None
    assert "cannot time mimo-v2-flash on 8 x a100: it has no data to time" in timed.fallback
    assert "MissingSystemFlopsError" in timed.fallback
    assert not timed.profile.source.startswith("aiconfigurator")


@needs_aic
def test_aic_does_not_offer_a_split_its_tables_lack() -> None:
    # vLLM's B200 data has no MoE kernel at expert TP2 x EP2 for MiMo-V2-Flash's experts:
    # that split compiles but cannot be timed, so it is not a candidate; the others are.
    spec, chip = get_model("mimo-v2-flash"), get_chip("b200")
    offered = parallelism_choices(spec, chip, 4, TimingChoice(TimingSource.AIC, AicEngine.VLLM))
    assert Parallelism(tp=4, ep=2) not in offered
    assert offered[0] == default_parallelism(spec, 4)
    for split in offered:
        timed = time_instance(spec, chip, split, TimingChoice(TimingSource.AIC, AicEngine.VLLM))
        assert timed.fallback is None and timed.profile.prefill_s(8192) > 0


@needs_aic
def test_aic_offers_only_the_default_where_it_cannot_time() -> None:
    # No H20 data: every split falls back to the roofline, which cannot tell splits apart.
    spec, choice = get_model("qwen3-235b"), TimingChoice(TimingSource.AIC)
    assert parallelism_choices(spec, get_chip("h20"), 8, choice) == [default_parallelism(spec, 8)]


@needs_aic
def test_attention_data_parallel_ranks_share_an_instances_requests() -> None:
    # aiconfigurator's batch is per attention-DP rank: 8 requests on 8 GPUs are one per rank
    # with DP8 and one batch of 8 with TP8. The same work on the same GPUs takes comparable
    # time (within 2x either way); counting the instance's batch per rank made DP8 6-8x slower.
    spec, chip, choice = get_model("qwen3-235b"), get_chip("b200"), TimingChoice(TimingSource.AIC)
    dp8 = time_instance(spec, chip, Parallelism(1, 8, 8), choice).profile
    tp8 = time_instance(spec, chip, Parallelism(8, 8), choice).profile
    assert (dp8.prefill_concurrency, tp8.prefill_concurrency) == (8, 1)
    for length in (2048, 8192):
        per_prompt_s = dp8.prefill_s(length) / dp8.prefill_concurrency  # 8 at once
        ratio = per_prompt_s / tp8.prefill_s(length)  # tp8: one request, no batching
        assert ratio < 1.0  # DP8's rate on 8 requests beats TP8 prefilling them one at a time
    for batch in (8, 64, 256):
        ratio = dp8.decode_step_s(batch, 8192) / tp8.decode_step_s(batch, 8192)
        assert 0.5 < ratio < 2.0


@needs_aic
def test_a_dp8_prompt_takes_one_ranks_prefill_and_the_instance_eight_at_once() -> None:
    """aiconfigurator's own TTFT of a DP8 prefill worker is its context latency at batch 1 per
    rank (8 prompts in flight): the profile's latency is that, its concurrency 8."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    spec, chip, choice = get_model("qwen3-235b"), get_chip("b200"), TimingChoice(TimingSource.AIC)
    profile = time_instance(spec, chip, Parallelism(1, 8, 8), choice).profile
    assert isinstance(profile, aic.AicProfile)
    handle = EngineHandle.compile(
        profile.model_id, profile.system, "sglang",
        tp_size=1, attention_dp_size=8, moe_tp_size=1, moe_ep_size=8,
    )  # fmt: skip
    for length in (1024, 8192, 32768):
        rank_s = handle.predict_prefill_latency(1, length) / 1e3
        assert profile.prefill_s(length) == pytest.approx(rank_s, rel=1e-12)
    assert profile.prefill_concurrency == 8


def test_a_scenario_times_planner_and_simulator_by_its_source(tmp_path: Path) -> None:
    text = DENSE_70B.read_text() + "timing: {source: measured}\n"
    path = tmp_path / "dense-70b-measured.yaml"
    path.write_text(text)
    scenario = load_scenario(str(path))
    assert scenario.timing.source is TimingSource.MEASURED
    assert scenario.timing_notes == (
        "prfaas: timing: no measured profile for llama-3.1-70b on 8 x h200; timed by the roofline",
        "pd: timing: no measured profile for llama-3.1-70b on 8 x h20; timed by the roofline",
    )


def test_aiconfigurator_is_imported_only_when_asked_for() -> None:
    code = (
        "import sys\n"
        "from prfaas.planner.scenario import load_scenario\n"
        "from prfaas.planner.parallel import search_parallelism\n"
        "s = load_scenario('paper-case-study')\n"
        "search_parallelism(s.hardware, s.workload, 1000, s.timing)\n"
        "bad = {'aiconfigurator_core', 'pandas', 'torch', 'fastapi'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
