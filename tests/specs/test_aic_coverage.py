"""No traceback on any covered combination (issue 30): every catalog chip with aiconfigurator
data x every catalog model (and a config.json it matches) x each engine is timed or falls back
with the one line."""

from __future__ import annotations

from aic_helpers import DEEPSEEK_V3, timed_at_8
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prfaas.specs import aic
from prfaas.specs.catalog import chip_names, get_chip, get_model, model_names, resolve_model
from prfaas.specs.model import ModelSpec
from prfaas.specs.timing import AicEngine, TimingChoice, TimingSource
from shared_specs import needs_aic


def _chips_with_data() -> list[str]:
    return [
        name
        for name in chip_names()
        if (system := aic.aic_system(get_chip(name))) is not None
        and any(aic.data_version(system, str(engine)) for engine in AicEngine)
    ]


def _models() -> list[ModelSpec]:
    return [*(get_model(name) for name in model_names()), resolve_model(str(DEEPSEEK_V3))]


@needs_aic
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_covered_combination_times_or_falls_back_with_one_line(data: st.DataObject) -> None:
    # Any catalog chip with aiconfigurator data x catalog model (and a config.json) x engine,
    # at the default split of 8 GPUs: prefill at 8K and a decode step are timed, or the one
    # fallback line says why not; nothing raises (a traceback out of `prfaas plan` before).
    chip = data.draw(st.sampled_from(_chips_with_data()), label="chip")
    model = data.draw(st.sampled_from(_models()), label="model")
    engine = data.draw(st.sampled_from(list(AicEngine)), label="engine")
    timed = timed_at_8(model, chip, TimingChoice(TimingSource.AIC, engine))
    if timed.fallback is not None:
        assert "\n" not in timed.fallback
        assert timed.fallback.startswith(f"timing: aiconfigurator ({engine}) cannot time ")
        assert not timed.profile.source.startswith("aiconfigurator")
    assert timed.profile.prefill_s(8192) > 0
    assert timed.profile.decode_step_s(16, 8192) > 0
