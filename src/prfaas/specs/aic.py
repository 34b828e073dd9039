"""NVIDIA aiconfigurator's measured kernel data as a `PerfProfile`: with `specs.aic_match` (which
of its models a config.json is), the only modules that import `aiconfigurator_core` (the
optional `prfaas[aic]` extra), and only when a plan asks for it.

aiconfigurator (`aiconfigurator-core` on PyPI, the planner of NVIDIA Dynamo) times a model on a
system by summing per-operation latencies interpolated from kernel measurements (GEMMs,
attention, MoE, all-reduce and all-to-all) collected per engine (SGLang, vLLM, TensorRT-LLM)
and engine version. We ask it, per instance, for:

    T_prefill(l)          predict_prefill_latency(batch = 1, isl = l)     one request's latency
    prefill concurrency   dp                                              prompts at once
    T_step(batch, c)      decode_step_latency(ceil(batch / dp), isl = c, osl = 2)

aiconfigurator's batch is per attention-data-parallel rank: its backends report the global
batch (its `concurrency`) as batch x attention_dp_size, a prefill worker's TTFT as the context
latency of that per-rank batch, and its rate as global batch / latency
(`BaseBackend`'s static-mode summary, aiconfigurator-core 0.12.0). So an instance with dp ranks
prefills dp prompts at once, each on one rank with the experts shared: one prompt's TTFT is
one rank's latency at batch 1, and the instance's rate is dp of them per that latency
(`PerfProfile.prefill_concurrency`; before, T_prefill was that latency over dp, right for the
rate and dp x short for the TTFT). A decode batch of B runs as dp ranks of B / dp each.
S_kv(l) stays our `ModelSpec.cache_bytes`, which the memory model (`specs.memory`) also uses.

Its planner's fixed factors (`aic_factors`, for the planner's `--margins aic`) are read here
too, from the separate `aiconfigurator` package, where installed.

Coverage is decided here, once per (model, chip, engine): the chip must have a system in
aiconfigurator's data, the one it names (`ChipSpec.aic_system`: `h200` -> `h200_sxm`), with
data for the engine, and the model must be one of aiconfigurator's model configs: a catalog
model by its Hugging Face id, a model read from a config.json by its shapes
(`specs.aic_match`). Anything else returns the reason, and `specs.timing` falls back to the
roofline with one line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from prfaas.specs.catalog import catalog_model, model_names
from prfaas.specs.chip import ChipSpec
from prfaas.specs.model import ModelSpec
from prfaas.specs.timing import Parallelism

DISTRIBUTION = "aiconfigurator-core"
#: aiconfigurator's planner (its `cli_default`, its fixed factors): read, never required.
PLANNER_DISTRIBUTION = "aiconfigurator"


def _package_dir() -> Path | None:
    try:
        return Path(str(resources.files("aiconfigurator_core")))
    except ModuleNotFoundError:
        return None


def aic_version() -> str | None:
    """The installed aiconfigurator-core version, None when the extra is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


@cache
def aic_systems() -> tuple[str, ...]:
    """The systems the installed aiconfigurator describes (with or without kernel data: see
    `data_version`), empty when the extra is not installed."""
    root = _package_dir()
    if root is None:
        return ()
    return tuple(sorted(p.name for p in (root / "systems" / "data").iterdir() if p.is_dir()))


def aic_system(chip: ChipSpec) -> str | None:
    """aiconfigurator's system for a chip, as the chip names it (`aic_system:` in chips.yaml or
    a scenario's `chips:`), None when it names none or the installed aiconfigurator lacks it."""
    return chip.aic_system if chip.aic_system in aic_systems() else None


def _canonical(hf_id: str) -> str:
    """Hugging Face ids compared without case and without the `Meta-` prefix Meta dropped when it
    renamed its Llama 3.1 repositories (`Meta-Llama-3.1-70B` -> `Llama-3.1-70B`)."""
    org, _, name = hf_id.lower().partition("/")
    return f"{org}/{name.removeprefix('meta-')}"


@cache
def _aic_models() -> dict[str, str]:
    """aiconfigurator's model ids (from its bundled configs), keyed by their canonical form."""
    root = _package_dir()
    if root is None:
        return {}
    ids = {}
    for path in (root / "model_configs").glob("*_config.json"):
        hf_id = path.name.removesuffix("_config.json").replace("--", "/", 1)
        ids[_canonical(hf_id)] = hf_id
    return ids


def aic_model_id(model: ModelSpec) -> str | None:
    """aiconfigurator's id of a model: a catalog model's by its Hugging Face id, a model read
    from a config.json by its shapes (`specs.aic_match`); None for a model it does not have."""
    if model.config_path is not None:
        from prfaas.specs.aic_match import matching_model_id

        return matching_model_id(model.config_path, model.name)
    if model.name not in model_names():
        return None
    hf_id = catalog_model(model.name).hf_id
    return _aic_models().get(_canonical(hf_id)) if hf_id else None


#: The prompt length of the probe that asks a compiled split for one prefill and one decode
#: step: aiconfigurator compiles splits whose data it lacks (an MoE shape missing from its
#: tables, fp8 kernels on a chip without fp8 FLOPS) and raises only when asked for a time.
PROBE_TOKENS = 128


@cache
def data_version(system: str, engine: str) -> str | None:
    """The engine version of the kernel data aiconfigurator queries on `system` (its `current`
    slot), None where it has no data for that engine."""
    from aiconfigurator_core.sdk import perf_database

    try:
        return str(perf_database.resolve_query_version(system, engine, "current"))
    except Exception:
        return None


@cache
def _engine(model_id: str, system: str, engine: str, split: Parallelism) -> Any:
    """A compiled aiconfigurator engine, one per (model, system, engine, split) per process."""
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    from aiconfigurator_core.sdk.engine import EngineHandle

    return EngineHandle.compile(
        model_id,
        system,
        engine,
        tp_size=split.tp,
        attention_dp_size=split.dp,
        moe_tp_size=split.moe_tp,
        moe_ep_size=split.ep,
    )


@dataclass(frozen=True, slots=True)
class AicProfile:
    """One instance timed by aiconfigurator (module docstring); answers are memoised."""

    model: ModelSpec
    chip: ChipSpec
    split: Parallelism
    model_id: str
    system: str
    engine: str
    data_version: str
    _prefill: dict[int, float] = field(default_factory=dict, compare=False, repr=False)
    _step: dict[tuple[int, int], float] = field(default_factory=dict, compare=False, repr=False)

    @property
    def gpus_per_instance(self) -> int:
        return self.split.num_gpus

    @property
    def prefill_concurrency(self) -> int:
        """The attention-DP ranks, each prefilling its own prompt (module docstring)."""
        return self.split.dp

    @property
    def source(self) -> str:
        return (
            f"aiconfigurator {aic_version()} ({self.engine} {self.data_version} data, "
            f"{self.system}, {self.split.label()}{self._matched()})"
        )

    def _matched(self) -> str:
        """Which bundled model a config.json was matched to (`specs.aic_match`), if one was."""
        return "" if self.model.config_path is None else f", as {self.model_id}"

    def _handle(self) -> Any:
        return _engine(self.model_id, self.system, self.engine, self.split)

    def prefill_s(self, length_tokens: int) -> float:
        value = self._prefill.get(length_tokens)
        if value is None:
            rank_ms = self._handle().predict_prefill_latency(1, length_tokens)
            value = self._prefill[length_tokens] = rank_ms / 1e3
        return value

    def cache_bytes(self, length_tokens: int) -> float:
        return float(self.model.cache_bytes(length_tokens))

    def decode_step_s(self, batch_size: int, context_tokens: int) -> float:
        key = (batch_size, context_tokens)
        value = self._step.get(key)
        if value is None:
            per_rank = -(-batch_size // self.split.dp)  # the ranks share the batch
            step_ms = self._handle().decode_step_latency(per_rank, max(1, context_tokens), 2)
            value = self._step[key] = step_ms / 1e3
        return value


def _coverage(model: ModelSpec, chip: ChipSpec, engine: str) -> tuple[str, str, str] | str:
    """Its model id, system and data version for this model, chip and engine, or why not."""
    if aic_version() is None:
        return "aiconfigurator-core is not installed (pip install 'prfaas[aic]')"
    system = aic_system(chip)
    if system is None:
        return f"it has no data for {chip.name}"
    version = data_version(system, engine)
    if version is None:
        return f"it has no {engine} data for {system}"
    model_id = aic_model_id(model)
    if model_id is None:
        return f"it does not model {model.name}"
    return model_id, system, version


def aic_profile(
    model: ModelSpec, chip: ChipSpec, split: Parallelism, engine: str
) -> AicProfile | str:
    """The aiconfigurator profile of one instance, or why it cannot time it."""
    covered = _coverage(model, chip, engine)
    if isinstance(covered, str):
        return covered
    model_id, system, version = covered
    try:
        _engine(model_id, system, engine, split)
    except Exception as err:  # its own error types: any refusal means "not covered"
        return f"it cannot compile {model_id} as {split.label()} ({type(err).__name__})"
    profile = AicProfile(model, chip, split, model_id, system, engine, version)
    try:  # it compiles splits whose kernels it has no data for, and says so only when asked
        profile.prefill_s(PROBE_TOKENS)
        profile.decode_step_s(1, PROBE_TOKENS)
    except Exception as err:
        return f"it has no data to time {model_id} as {split.label()} ({type(err).__name__})"
    return profile


@dataclass(frozen=True, slots=True)
class AicFactors:
    """aiconfigurator's fixed factors as its planner applies them to a disaggregated plan:
    latency corrections multiply a worker's prefill latency and decode step (so also the TPOT
    its decode batch must meet), rate matching derates each role's throughput, and its TTFT
    filter wants a prefill worker's corrected latency times `ttft_correction` under the
    target."""

    version: str
    prefill_latency_correction: float
    decode_latency_correction: float
    prefill_rate_matching: float
    decode_rate_matching: float
    ttft_correction: float


def aic_factors() -> AicFactors | str:
    """The factors read from the installed `aiconfigurator` package (its planner, which
    prfaas does not depend on: the defaults of its `Task`), or why they cannot be read."""
    try:
        from aiconfigurator.sdk.task_v2 import Task

        version = metadata.version(PLANNER_DISTRIBUTION)
    except (ImportError, metadata.PackageNotFoundError):
        return (
            f"the {PLANNER_DISTRIBUTION} package (aiconfigurator's planner, beside "
            f"{DISTRIBUTION}) is not installed"
        )
    fields = Task.__dataclass_fields__

    def default(name: str) -> float:
        return float(fields[name].default)

    return AicFactors(
        version=version,
        prefill_latency_correction=default("prefill_latency_correction"),
        decode_latency_correction=default("decode_latency_correction"),
        prefill_rate_matching=default("rate_match_prefill_degradation"),
        decode_rate_matching=default("rate_match_decode_degradation"),
        ttft_correction=default("autoscale_ttft_correction_factor"),
    )
