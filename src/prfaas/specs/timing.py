"""Which timing source times an instance, chosen by the user, the same for planner and simulator.

Three sources (docs/planner.md, "Timing sources"):

* `roofline` (the default): the calibrated roofline of `specs.perf`, except where the catalog
  holds measured points for that exact deployment (`catalog.profile_for`: measured beats
  modelled). This is what reproduces the paper's Table 6 and Fig. 5.
* `measured`: the catalog's measured points only; a deployment without them falls back to the
  roofline with one line saying so.
* `aic`: NVIDIA aiconfigurator's measured kernel data (`specs.aic`, the optional `prfaas[aic]`
  extra), for one serving engine (SGLang, vLLM or TensorRT-LLM) and one split of the instance's
  GPUs among tensor, expert and attention-data parallelism. A model, chip or engine it does
  not cover (the paper's H20, hybrid families it lacks), or the extra not installed, falls back
  to the roofline with one line.

`time_instance` is the one entry point: the scenario loader calls it for every cluster, so the
planner and the simulator (which builds its deployment through the scenario loader) are timed
by the same source. Every `PerfProfile.source` names what timed it, and is printed beside every
figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from prfaas.specs.catalog import measured_profile, profile_for
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec, MoeMlp
from prfaas.specs.perf import PerfProfile, RooflineProfile


class TimingSource(StrEnum):
    ROOFLINE = "roofline"
    MEASURED = "measured"
    AIC = "aic"

    @property
    def times_splits(self) -> bool:
        """Whether the source times how an instance's GPUs are split, not only how many there
        are: the roofline and the measured points are functions of the GPU count (their
        profiles take no split), aiconfigurator's kernel data of the whole split."""
        return self is TimingSource.AIC


class AicEngine(StrEnum):
    """The serving engines aiconfigurator has kernel data for (its backend names)."""

    SGLANG = "sglang"
    VLLM = "vllm"
    TRTLLM = "trtllm"


@dataclass(frozen=True, slots=True)
class TimingChoice:
    """The user's choice: a source and, for `aic`, the engine whose data times it."""

    source: TimingSource = TimingSource.ROOFLINE
    engine: AicEngine = AicEngine.SGLANG

    def describe(self) -> str:
        return f"aic ({self.engine})" if self.source is TimingSource.AIC else str(self.source)


@dataclass(frozen=True, slots=True, order=True)
class Parallelism:
    """How one instance's GPUs are split: attention over `tp` x `dp` GPUs (tensor x attention
    data parallel), expert MLPs over `ep` GPUs of expert parallelism and the rest tensor
    parallel (moe_tp = tp x dp / ep). A dense model has ep = 1."""

    tp: int
    ep: int = 1
    dp: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        return self.num_gpus // self.ep

    def label(self) -> str:
        parts = [f"tp{self.tp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        return " ".join(parts)


def default_parallelism(model: ModelSpec, gpus_per_instance: int) -> Parallelism:
    """The split an instance of `gpus_per_instance` GPUs gets unless searched: tensor parallel
    attention, experts (if any) spread by expert parallelism (the engines' usual MoE layout)."""
    is_moe = any(isinstance(mlp, MoeMlp) for mlp in model.mlps)
    return Parallelism(tp=gpus_per_instance, ep=gpus_per_instance if is_moe else 1)


def _divisors(num_gpus: int) -> list[int]:
    return [d for d in range(1, num_gpus + 1) if num_gpus % d == 0]


def instance_splits(model: ModelSpec, gpus_per_instance: int) -> list[Parallelism]:
    """Every split of `gpus_per_instance` GPUs: attention over tp x dp = all of them, and for
    an MoE model the experts over ep x moe_tp = all of them (a dense model has no experts to
    split: ep = 1). 8 GPUs: 4 attention splits, times 4 expert splits for MoE."""
    is_moe = any(isinstance(mlp, MoeMlp) for mlp in model.mlps)
    g = gpus_per_instance
    return [
        Parallelism(tp=g // dp, ep=ep, dp=dp)
        for dp in _divisors(g)
        for ep in (_divisors(g) if is_moe else [1])
    ]


def _source_times(
    model: ModelSpec, chip: ChipSpec, split: Parallelism, choice: TimingChoice
) -> bool:
    """Whether the source itself times `split` (no fallback): asked of aiconfigurator, which
    compiles the split or refuses it."""
    if not choice.source.times_splits:
        return False
    from prfaas.specs.aic import aic_profile

    return not isinstance(aic_profile(model, chip, split, str(choice.engine)), str)


def parallelism_choices(
    model: ModelSpec, chip: ChipSpec, gpus_per_instance: int, choice: TimingChoice
) -> list[Parallelism]:
    """The splits of `gpus_per_instance` GPUs the chosen source can tell apart, the default
    split first (always offered; `time_instance` says when it falls back). A source that times
    a GPU count only (`TimingSource.times_splits`) offers the default alone; aiconfigurator
    offers every split of `instance_splits` it compiles and has the data to time (`aic_profile`
    asks it once) for this model, chip and engine."""
    default = default_parallelism(model, gpus_per_instance)
    others = [
        split
        for split in instance_splits(model, gpus_per_instance)
        if split != default and _source_times(model, chip, split, choice)
    ]
    return [default, *others]


@dataclass(frozen=True, slots=True)
class TimedInstance:
    """A profile and, where the chosen source could not time the instance, the one line
    saying what timed it instead."""

    profile: PerfProfile
    fallback: str | None = None


def time_instance(
    model: ModelSpec, chip: ChipSpec, parallelism: Parallelism, choice: TimingChoice
) -> TimedInstance:
    """The profile of one instance under `choice` (module docstring)."""
    gpus = parallelism.num_gpus
    where = f"{model.name} on {gpus} x {chip.name}"
    if choice.source is TimingSource.ROOFLINE:
        return TimedInstance(profile_for(model, chip, gpus))
    if choice.source is TimingSource.MEASURED:
        measured = measured_profile(model, chip, gpus)
        if measured is not None:
            return TimedInstance(measured)
        return TimedInstance(
            RooflineProfile(model, chip, gpus),
            f"timing: no measured profile for {where}; timed by the roofline",
        )
    from prfaas.specs.aic import aic_profile

    timed = aic_profile(model, chip, parallelism, str(choice.engine))
    if isinstance(timed, str):
        return TimedInstance(
            profile_for(model, chip, gpus),
            f"timing: aiconfigurator ({choice.engine}) cannot time {where}: {timed}; "
            "timed by the default (roofline) source instead",
        )
    return TimedInstance(timed)
