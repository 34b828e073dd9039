"""Scenario files: the deployment and workload a plan is made for, in YAML.

    name: paper-case-study
    model: prfaas-1t                       # catalog name, model YAML or HF config.json (a
                                           # relative path starts from this file)
    prfaas: {chip: h200, num_gpus: 32, gpus_per_instance: 8}
    pd: {chip: h20, num_gpus: 64, gpus_per_instance: 8}
    link_gbps: 100
    decode: {slo_tokens_per_s: 40}
    prefill: {ttft_slo_s: 5}               # optional TTFT objective (mean, queueing included)
    workload:                              # either input + output distributions ...
      input: {lognormal: {mu: 9.90, sigma: 1.00, min_tokens: 128, max_tokens: 128K}}
      output: {fixed_tokens: 1024}
    # ... or a Mooncake-format trace (path relative to this file; null capacity = unbounded):
    #   trace: {path: conversation.jsonl, cache_capacity_blocks: 20000}
    threshold_step_tokens: 100             # threshold grid step (and histogram bin width)
    timing: {source: roofline}             # or measured, or aic with engine: sglang | vllm |
                                           # trtllm (specs.timing); planner and simulator alike
    chips:                                 # chips the catalog lacks, as chips.yaml describes
      my-gpu: {display_name: ..., dense_bf16_tflops: ..., ..., aic_system: gb200}
                                           # (aic_system optional); `chip: my-gpu` above

`prfaas simulate` reads three more optional sections (the planner ignores them):

    arrivals: {process: poisson, rate_per_s: 2.5, num_requests: 5000}   # or uniform, gamma
                                           # (cv: 2.0) or trace (time_scale: 0.5); shift:
                                           # {at_s: 1800, input_scale: 0.5} rescales inputs
    link: {rtt_s: 0.01, connections: 8, capacity_steps: [{at_s: 600, gbps: 5}]}
    simulation: {policy: prfaas, seed: 0, slo: {ttft_s: 10, tpot_s: 0.025},
                 rebalance: {period_s: 120}, admission: {mode: shed}}

Token counts accept `128K` (= 131,072). Validation is pydantic; any problem is a one-line
`SpecFileError` naming the file and the field. Scenarios shipped with the package live in
`planner/data/scenarios/` and are loaded by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from prfaas.planner.model import Cluster, Hardware
from prfaas.specs.catalog import resolve_model
from prfaas.specs.chip import ChipSpec
from prfaas.specs.described_chips import described_chips, resolve_chip
from prfaas.specs.errors import SpecError, SpecFileError
from prfaas.specs.files import ChipFile, read_yaml, validate
from prfaas.specs.memory import instance_memory, startup_rule
from prfaas.specs.model import ModelSpec
from prfaas.specs.timing import (
    AicEngine,
    TimingChoice,
    TimingSource,
    default_parallelism,
    time_instance,
)
from prfaas.specs.units import format_tokens, parse_tokens
from prfaas.workload.lengths import FixedLength, LengthDistribution, TruncatedLognormal
from prfaas.workload.trace import MOONCAKE_BLOCK_TOKENS, read_mooncake_trace
from prfaas.workload.workload import Workload

#: How far (in sigmas) mu may sit outside [ln min_tokens, ln max_tokens]: beyond it the bounds
#: hold under 3e-5 of the lognormal's mass and the "distribution" is a sliver of its tail.
MU_SLACK_SIGMAS = 4.0


def _tokens(value: Any) -> Any:
    return parse_tokens(value) if isinstance(value, str) else value


Tokens = Annotated[int, BeforeValidator(_tokens), Field(ge=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ClusterFile(_Strict):
    chip: str
    gpus_per_instance: int = Field(gt=0)
    num_gpus: int = Field(gt=0)

    @field_validator("num_gpus")
    @classmethod
    def _whole_instances(cls, value: int, info: ValidationInfo) -> int:
        per = info.data.get("gpus_per_instance")
        if per and value % per:
            raise ValueError(f"{value} GPUs are not whole instances of {per}")
        return value


class LognormalFile(_Strict):
    sigma: float = Field(gt=0)
    min_tokens: Tokens
    max_tokens: Tokens
    mu: float

    @field_validator("mu")
    @classmethod
    def _mu_in_range(cls, value: float, info: ValidationInfo) -> float:
        data = info.data
        if {"sigma", "min_tokens", "max_tokens"} - data.keys():
            return value  # another field already failed
        if data["min_tokens"] >= data["max_tokens"]:
            raise ValueError("min_tokens must be below max_tokens")
        slack = MU_SLACK_SIGMAS * data["sigma"]
        lo, hi = math.log(data["min_tokens"]) - slack, math.log(data["max_tokens"]) + slack
        if not lo <= value <= hi:
            raise ValueError(f"{value:g} is out of range [{lo:.2f}, {hi:.2f}] for these bounds")
        return value

    def to_distribution(self) -> TruncatedLognormal:
        return TruncatedLognormal(self.mu, self.sigma, self.min_tokens, self.max_tokens)


class LengthsFile(_Strict):
    """Exactly one of a lognormal and a fixed length."""

    lognormal: LognormalFile | None = None
    fixed_tokens: Tokens | None = None

    def to_distribution(self, where: str) -> LengthDistribution:
        if self.lognormal is not None and self.fixed_tokens is None:
            return self.lognormal.to_distribution()
        if self.fixed_tokens is not None and self.lognormal is None:
            return FixedLength(self.fixed_tokens)
        raise SpecFileError(f"{where}: give exactly one of lognormal, fixed_tokens")

    def describe(self) -> str:
        if self.lognormal is not None:
            ln = self.lognormal
            return (
                f"lognormal(mu={ln.mu:g}, sigma={ln.sigma:g}) on "
                f"[{format_tokens(ln.min_tokens)}, {format_tokens(ln.max_tokens)}]"
            )
        return f"fixed {self.fixed_tokens}"


class TraceFile(_Strict):
    path: str
    cache_capacity_blocks: int | None = Field(ge=0)
    block_tokens: int = Field(default=MOONCAKE_BLOCK_TOKENS, gt=0)


class WorkloadFile(_Strict):
    input: LengthsFile | None = None
    output: LengthsFile | None = None
    trace: TraceFile | None = None


class DecodeFile(_Strict):
    slo_tokens_per_s: float = Field(gt=0)


class PrefillFile(_Strict):
    """The TTFT objective: each prefill path's mean TTFT, queueing included (`planner.queueing`)."""

    ttft_slo_s: float = Field(gt=0)


class ShiftFile(_Strict):
    at_s: float = Field(ge=0)
    input_scale: float = Field(gt=0)


class ArrivalsFile(_Strict):
    """How requests arrive in a simulation; `trace` replays the workload trace's timestamps."""

    process: Literal["poisson", "uniform", "gamma", "trace"] = "poisson"
    rate_per_s: float | None = Field(default=None, gt=0)
    num_requests: int | None = Field(default=None, ge=1)
    cv: float = Field(default=1.0, gt=0)
    time_scale: float = Field(default=1.0, gt=0, le=1000.0)
    shift: ShiftFile | None = None


class CapacityStepFile(_Strict):
    at_s: float = Field(ge=0)
    gbps: float = Field(gt=0)


class LinkFile(_Strict):
    """The inter-cluster link as the simulator models it (link_gbps is its start capacity)."""

    rtt_s: float = Field(default=0.01, ge=0)
    connections: int = Field(default=8, ge=1)
    per_connection_gbps: float | None = Field(default=None, gt=0)
    capacity_steps: list[CapacityStepFile] = Field(default_factory=list)
    capacity_file: str | None = None  # CSV of time_s,gbps (relative to the scenario file)


class SloFile(_Strict):
    ttft_s: float | None = Field(default=None, gt=0)
    tpot_s: float | None = Field(default=None, gt=0)


class RebalanceFile(_Strict):
    """The slow loop's settings (`prfaas.scheduler.rebalancer`), one schema with one set of
    defaults for the simulator (`simulation.rebalance`) and the live router (the deployment
    file's `rebalance`, which adds its live-only fields). Each default and its reason:
    docs/scheduler.md ("Triggers and defaults"); period and samples are the ones the damping
    was validated with in the simulator (with a 60 s period a role flip was undone a period
    later there, and the loop lost requests in SLO)."""

    period_s: float = Field(default=120.0, ge=1.0)
    min_samples: int = Field(default=200, ge=1)
    step_tokens: int = Field(default=500, gt=0)  # the planner's threshold grid step
    busy_utilisation: float = Field(default=0.85, gt=0, le=1)
    idle_utilisation: float = Field(default=0.5, ge=0, le=1)
    queue_s: float = Field(default=10.0, ge=0)
    min_threshold_change: float = Field(default=0.05, ge=0)
    overload_refusal_fraction: float = Field(default=0.05, gt=0, le=1)
    refusal_dominance: float = Field(default=2.0, ge=1)
    max_threshold_step_fraction: float = Field(default=0.25, gt=0)
    reversal_change: float = Field(default=0.15, ge=0)
    min_gain_fraction: float = Field(default=0.01, ge=0)


#: The TTFT objective admission control holds a scenario to when it names none (`slo.ttft_s`):
#: the live router's default too (`serve.config.admission_spec.AdmissionSpec.ttft_slo_s`).
DEFAULT_TTFT_SLO_S = 10.0


def _bare_off(value: Any) -> Any:
    """YAML 1.1 reads a bare `off` as false: `mode: off` means off."""
    return "off" if value is False else value


#: An admission mode as a YAML file writes it (scenario files here, deployment files in serve).
AdmissionModeName = Annotated[Literal["off", "shed", "defer"], BeforeValidator(_bare_off)]


class AdmissionFile(_Strict):
    """Admission control (prfaas.scheduler.admission), on by default (issue 27: past saturation
    a FCFS queue without it makes every request late); `mode: off` is the explicit opt-out. The
    TTFT objective is `slo.ttft_s`, else `DEFAULT_TTFT_SLO_S`."""

    mode: AdmissionModeName = "shed"

    margin_fraction: float = Field(default=0.0, ge=0)
    max_defer_s: float = Field(default=30.0, ge=0)


class DeploymentFile(_Strict):
    n_prfaas: int = Field(ge=0)
    n_p: int = Field(ge=0)
    n_d: int = Field(ge=1)
    threshold_tokens: Tokens | None = None


class SimulationFile(_Strict):
    """Simulator settings; every field has a default (docs/simulation.md)."""

    policy: str = "prfaas"
    seed: int = 0
    slo: SloFile = Field(default_factory=SloFile)
    rebalance: RebalanceFile | None = None
    admission: AdmissionFile = Field(default_factory=AdmissionFile)
    deployment: DeploymentFile | None = None
    #: Trace workloads: the plan whose deployment runs (scheduler.trace_plan; docs/planner.md).
    plan_mode: Literal["pool-aware", "ideal"] = "pool-aware"
    prefill_chunk_tokens: Tokens = 8192
    prefill_max_batch_requests: int = Field(default=1, ge=1)
    decode_kv_gib: float | None = Field(default=None, gt=0)  # None: the memory model
    prefix_cache_gib: float = Field(default=0.0, ge=0)
    #: A disk tier below each instance's prefix pool (0: none; docs/kvcache.md, "Tiers").
    prefix_cache_disk_gib: float = Field(default=0.0, ge=0)
    disk_read_gib_per_s: float = Field(default=2.0, gt=0)
    disk_write_gib_per_s: float = Field(default=1.0, gt=0)
    rdma_gbps: float = Field(default=800.0, gt=0)
    sample_period_s: float = Field(default=10.0, ge=0.1)


class TimingFile(_Strict):
    """Which source times every instance, for the planner and the simulator alike
    (`specs.timing`); `engine` picks aiconfigurator's kernel data (source `aic` only)."""

    source: TimingSource = TimingSource.ROOFLINE
    engine: AicEngine = AicEngine.SGLANG

    def to_choice(self) -> TimingChoice:
        return TimingChoice(self.source, self.engine)


class ScenarioFile(_Strict):
    name: str
    description: str = ""
    model: str
    prfaas: ClusterFile
    pd: ClusterFile
    link_gbps: float = Field(gt=0)
    decode: DecodeFile
    prefill: PrefillFile | None = None  # None: no TTFT objective (the paper's case study)
    workload: WorkloadFile
    threshold_step_tokens: int = Field(default=100, ge=1, le=100)
    timing: TimingFile = Field(default_factory=TimingFile)
    arrivals: ArrivalsFile | None = None
    link: LinkFile | None = None
    simulation: SimulationFile | None = None
    #: Chips the catalog lacks, by name, each as chips.yaml describes one (specs.described_chips).
    chips: dict[str, ChipFile] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario, resolved against the catalog and ready to plan."""

    name: str
    description: str
    hardware: Hardware
    workload: Workload
    threshold_step_tokens: int
    timing: TimingChoice = TimingChoice()  # noqa: RUF009 - frozen, so one shared default is safe
    timing_notes: tuple[str, ...] = ()  # one line per cluster the chosen source could not time


def _chip(name: str, chips: dict[str, ChipSpec], where: str) -> ChipSpec:
    """A cluster's chip: the scenario's own (`chips:`) or the catalog's."""
    try:
        return resolve_chip(name, chips)
    except SpecError as err:
        raise SpecFileError(f"{where}.chip: {err}") from None


def _cluster(
    model: ModelSpec, body: ClusterFile, chip: ChipSpec, timing: TimingChoice
) -> tuple[Cluster, str | None]:
    """The cluster timed by `timing`, and its fallback line (None when the source timed it)."""
    parallelism = default_parallelism(model, body.gpus_per_instance)
    timed = time_instance(model, chip, parallelism, timing)
    profile = timed.profile
    memory = instance_memory(profile, rule=startup_rule(timing))
    cluster = Cluster(profile, body.num_gpus // body.gpus_per_instance, memory)
    return cluster, timed.fallback


def _workload(body: WorkloadFile, base_dir: Path, where: str) -> Workload:
    if body.trace is not None:
        if body.input is not None or body.output is not None:
            raise SpecFileError(f"{where}: workload: give either trace or input + output")
        trace = body.trace
        path = base_dir / trace.path
        blocks = trace.cache_capacity_blocks
        cache = (
            "unbounded prefix cache"
            if blocks is None
            else f"prefix cache of {blocks:,} blocks x {trace.block_tokens} tokens"
        )
        return Workload.from_trace(
            read_mooncake_trace(path, trace.block_tokens),
            blocks,
            f"trace {path.name}, {cache}",
            trace.block_tokens,
        )
    if body.input is None or body.output is None:
        raise SpecFileError(f"{where}: workload: give either trace or both input and output")
    return Workload.synthetic(
        body.input.to_distribution(f"{where}: workload.input"),
        body.output.to_distribution(f"{where}: workload.output"),
        f"input {body.input.describe()}, output {body.output.describe()}",
    )


def model_ref(ref: str, base_dir: Path) -> str:
    """A scenario's `model:` as `resolve_model` takes it: a relative model file or checkpoint
    directory starts from the scenario file's directory (as trace paths do); a catalog name is
    left as it is."""
    path = Path(ref)
    is_file_ref = path.suffix in {".yaml", ".yml", ".json"} or (base_dir / path).is_dir()
    return str(base_dir / path) if is_file_ref and not path.is_absolute() else ref


def build_scenario(body: ScenarioFile, base_dir: Path, where: str) -> Scenario:
    """Resolve model, chips and profiles; read the trace if there is one."""
    try:
        model = resolve_model(model_ref(body.model, base_dir))
    except SpecError as err:
        raise SpecFileError(f"{where}: model: {err}") from None
    timing = body.timing.to_choice()
    chips = described_chips(body.chips, f"{where}: chips")
    prfaas_chip = _chip(body.prfaas.chip, chips, f"{where}: prfaas")
    pd_chip = _chip(body.pd.chip, chips, f"{where}: pd")
    prfaas, prfaas_note = _cluster(model, body.prfaas, prfaas_chip, timing)
    pd, pd_note = _cluster(model, body.pd, pd_chip, timing)
    hardware = Hardware(
        prfaas=prfaas,
        pd=pd,
        link_gbps=body.link_gbps,
        decode_slo_tokens_per_s=body.decode.slo_tokens_per_s,
        ttft_slo_s=None if body.prefill is None else body.prefill.ttft_slo_s,
    )
    return Scenario(
        name=body.name,
        description=body.description,
        hardware=hardware,
        workload=_workload(body.workload, base_dir, where),
        threshold_step_tokens=body.threshold_step_tokens,
        timing=timing,
        timing_notes=tuple(
            f"{role}: {note}" for role, note in (("prfaas", prfaas_note), ("pd", pd_note)) if note
        ),
    )


def _bundled_dir() -> Path:
    return Path(str(resources.files("prfaas.planner") / "data" / "scenarios"))


def bundled_scenarios() -> list[str]:
    return sorted(path.stem for path in _bundled_dir().glob("*.yaml"))


def scenario_path(ref: str) -> Path:
    """A bundled scenario's file by name, or `ref` itself when it names a YAML file."""
    path = Path(ref)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return path
    bundled = _bundled_dir() / f"{ref}.yaml"
    if not bundled.exists():
        known = ", ".join(bundled_scenarios())
        raise SpecFileError(f"unknown scenario {ref!r} (bundled: {known}; or give a YAML file)")
    return bundled


def read_scenario_file(ref: str) -> tuple[ScenarioFile, Path]:
    """The validated file of a scenario and the directory its relative paths start from."""
    path = scenario_path(ref)
    body: ScenarioFile = validate(ScenarioFile, read_yaml(path), str(path.name))
    return body, path.parent


def load_scenario(ref: str) -> Scenario:
    body, base_dir = read_scenario_file(ref)
    return build_scenario(body, base_dir, Path(ref).name)
