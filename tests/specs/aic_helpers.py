"""What the aiconfigurator tests share: a config.json of a model outside our catalog, and an
instance of 8 GPUs at its default split (the skip without the extra: `shared_specs`)."""

from __future__ import annotations

from pathlib import Path

from prfaas.specs.catalog import get_chip
from prfaas.specs.model import ModelSpec
from prfaas.specs.timing import (
    TimedInstance,
    TimingChoice,
    TimingSource,
    default_parallelism,
    time_instance,
)

DEEPSEEK_V3 = Path(__file__).parents[1] / "fixtures" / "hf_configs" / "deepseek-v3.json"
AIC = TimingChoice(TimingSource.AIC)


def timed_at_8(model: ModelSpec, chip: str, choice: TimingChoice = AIC) -> TimedInstance:
    """`model` on 8 GPUs of the catalog's `chip` at the default split, timed by `choice`."""
    return time_instance(model, get_chip(chip), default_parallelism(model, 8), choice)
