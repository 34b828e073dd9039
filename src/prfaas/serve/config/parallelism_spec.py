"""An instance's `parallelism:` and `timing:` in the deployment file: the split of its GPUs the
plan chose, and (emulated instances) the timing source that planned it.

    instances:
      - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas, backend: emulated, chip: h200,
         gpus_per_instance: 8, parallelism: {tp: 1, dp: 8, ep: 8},
         timing: {source: aic, engine: sglang}}

`prfaas plan --deployment-out` writes both (cli.plan_deploy), so the deployment `prfaas up`
runs is the one planned: an emulated instance is timed by `specs.timing.time_instance` with
that source and split (serve.backends.emulated), a `vllm` instance's engine runs the split
(`vllm_flags`), and a role flip keeps an instance's split (serve.router.rebalance).

Left out, `parallelism` is `specs.timing.default_parallelism` of the model where prfaas knows
the model (the split every plan made before the search), and for a `vllm` instance the
engine's own defaults (no flag added: what such a file always meant); `timing` is the
roofline. Pure data and checks: `serve.config.deployment` embeds and validates them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from prfaas.specs.model import ModelSpec, MoeMlp
from prfaas.specs.timing import AicEngine, Parallelism, TimingChoice, TimingSource


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParallelismSpec(_Strict):
    """Attention over tp x dp GPUs (tensor x attention data parallel), experts over ep GPUs of
    expert parallelism and tensor parallel over the rest (`specs.timing.Parallelism`)."""

    tp: int = Field(gt=0)
    dp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)

    @classmethod
    def of(cls, split: Parallelism) -> ParallelismSpec:
        return cls(tp=split.tp, dp=split.dp, ep=split.ep)

    def split(self) -> Parallelism:
        return Parallelism(tp=self.tp, ep=self.ep, dp=self.dp)


class TimingSpec(_Strict):
    """The source that times an emulated instance (`specs.timing`); `engine` picks
    aiconfigurator's data (source `aic` only)."""

    source: TimingSource = TimingSource.ROOFLINE
    engine: AicEngine = AicEngine.SGLANG

    @classmethod
    def of(cls, choice: TimingChoice) -> TimingSpec:
        return cls(source=choice.source, engine=choice.engine)

    def choice(self) -> TimingChoice:
        return TimingChoice(self.source, self.engine)


def split_problem(split: Parallelism, gpus_per_instance: int) -> str | None:
    """Why `split` is not a split of `gpus_per_instance` GPUs (None: it is)."""
    if split.num_gpus != gpus_per_instance:
        return (
            f"tp {split.tp} x dp {split.dp} = {split.num_gpus} GPUs, "
            f"but gpus_per_instance is {gpus_per_instance}"
        )
    if gpus_per_instance % split.ep:
        return f"ep {split.ep} does not divide the instance's {gpus_per_instance} GPUs"
    return None


def model_split_problem(model: ModelSpec, split: Parallelism) -> str | None:
    """Why `model` cannot run `split` (None: it can): a dense model has no experts to spread."""
    if split.ep > 1 and not any(isinstance(mlp, MoeMlp) for mlp in model.mlps):
        return f"ep {split.ep}: {model.name} is dense (no experts), so ep must be 1"
    return None


def vllm_split_problem(split: Parallelism) -> str | None:
    """Why vLLM cannot run `split` (None: it can). vLLM's experts are tensor parallel over all
    tp x dp ranks (ep 1), or expert parallel over all of them with `--enable-expert-parallel`
    (its EP size is always tp x dp): no other ep."""
    if split.ep in (1, split.num_gpus):
        return None
    return (
        f"vllm cannot run ep {split.ep} of {split.num_gpus} GPUs: its experts are tensor "
        f"parallel over all tp x dp ranks (ep 1) or expert parallel over all of them "
        f"(ep {split.num_gpus}, --enable-expert-parallel)"
    )


#: `vllm serve` flags (and their short forms) that `parallelism` gives a vllm instance.
VLLM_SPLIT_FLAGS = frozenset(
    {"--tensor-parallel-size", "-tp", "--data-parallel-size", "-dp", "--enable-expert-parallel"}
)


def vllm_flags(split: Parallelism) -> list[str]:
    """The `vllm serve` flags that run `split` (one checked by `vllm_split_problem`)."""
    flags = ["--tensor-parallel-size", str(split.tp), "--data-parallel-size", str(split.dp)]
    if split.ep > 1:
        flags.append("--enable-expert-parallel")
    return flags
