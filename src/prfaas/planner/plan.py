"""A plan: PrfaaS-PD at its optimum beside the paper's baselines (section 5, Table 6).

    prfaas_pd               the PrfaaS cluster plus the PD cluster, best t and N_p / N_d
    homogeneous_pd          as many PD-chip GPUs as PrfaaS-PD has in all, best N_p / N_d
    naive_heterogeneous     all prefill on the PrfaaS cluster, all PD instances decode, no t
    equal_cost_homogeneous  PD-chip instances costing no more than PrfaaS-PD, best N_p / N_d

PD-P and PD-D instances take their roles' shapes (`Hardware.pd_decode`; one shape unless the
parallelism search gave each its own), and the PD baselines keep them: their GPUs are split as
`Hardware.pd_splits` lists. Prices are `ChipSpec.relative_price` per GPU (H20 = 1). One
`StageModel` serves all four: the
baselines are the ends of its threshold grid (see `planner.model`). Also returned: the two
sweeps behind the paper's Fig. 5 (Lambda_max versus N_p with t re-optimised per N_p, and the
bounds versus t at the optimal N_p / N_d), the decode capacity, and the memory fit check
(`specs.memory`): one warning per cluster whose weights do not fit its instances.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.model import DecodeCapacity, Hardware, StageModel
from prfaas.planner.optimise import (
    OperatingPoint,
    ThresholdSweep,
    best_split,
    operating_point,
    threshold_sweep,
)
from prfaas.workload.workload import Workload

DEPLOYMENTS = ("prfaas_pd", "homogeneous_pd", "naive_heterogeneous", "equal_cost_homogeneous")


@dataclass(frozen=True, slots=True)
class PlanReport:
    """The four deployments (keyed as in `DEPLOYMENTS`) and the data of the two figures."""

    deployments: dict[str, OperatingPoint]
    n_p_sweep: tuple[OperatingPoint, ...]
    threshold_sweep: ThresholdSweep
    decode: DecodeCapacity
    workload: Workload
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON report: one object per deployment, ratios against homogeneous PD and of
        PrfaaS-PD against each deployment; then `decode` (BS_max and its two bounds) and
        `warnings` (the memory fit check)."""
        base = self.deployments["homogeneous_pd"].lambda_max
        best = self.deployments["prfaas_pd"].lambda_max
        out: dict[str, Any] = {
            name: asdict(point)
            | {
                "bottleneck": str(point.bottleneck),
                "ratio_to_homogeneous": point.lambda_max / base if base > 0 else None,
                "prfaas_pd_speedup": best / point.lambda_max if point.lambda_max > 0 else None,
            }
            for name, point in self.deployments.items()
        }
        return out | {"decode": asdict(self.decode), "warnings": list(self.warnings)}


def fit_warnings(hardware: Hardware) -> tuple[str, ...]:
    """The memory fit check of both clusters: a line per cluster (and PD-D shape) whose
    weights do not fit."""
    decode_only = "; decode is bounded by the latency objective only"
    roles = [("prfaas", hardware.prfaas, ""), ("pd", hardware.pd, decode_only)]
    if hardware.pd_decode is not None:
        roles = [roles[0], ("pd-p", hardware.pd, ""), ("pd-d", hardware.pd_decode, decode_only)]
    lines = []
    for role, cluster, consequence in roles:
        warning = None if cluster.memory is None else cluster.memory.fit_warning()
        if warning is not None:
            lines.append(f"{role}: {warning}{consequence}")
    return tuple(lines)


def _homogeneous(model: StageModel, num_gpus: int) -> OperatingPoint:
    """`num_gpus` of the PD chip in PD instances, best split, no offloading (the last
    threshold edge)."""
    splits = model.hardware.pd_splits(num_gpus)
    if not splits:
        raise InfeasiblePlanError("a homogeneous PD baseline needs at least 2 instances")
    top = model.num_thresholds - 1
    (n_p, n_d), _ = best_split(model, 0, splits, [top])
    # Under a TTFT objective that PD-P misses even idle this baseline serves nothing (0 req/s,
    # its ratios None): it is a baseline, and PrfaaS-PD may still meet the objective.
    return operating_point(model, 0, n_p, n_d, top, has_threshold=False)


def _served(point: OperatingPoint, model: StageModel) -> OperatingPoint:
    """The PrfaaS-PD point, unless it serves nothing: only a TTFT objective that no split and
    threshold meets does that (`planner.queueing`), and the plan is then refused."""
    if point.lambda_max > 0:
        return point
    mass, hw = model.histogram.mass, model.hardware
    bare = {
        "PD": (float(model.bin_pd_prefill_s @ mass), hw.pd.profile),
        "PrfaaS": (float(model.bin_prfaas_prefill_s @ mass), hw.prfaas.profile),
    }
    alone = ", ".join(
        f"{bare_s:.3g} s on {name} ({profile.chip.name} x{profile.gpus_per_instance})"
        for name, (bare_s, profile) in bare.items()
    )
    raise InfeasiblePlanError(
        f"prefill: no split and threshold meets the TTFT objective of {hw.ttft_slo_s:g} s "
        f"(a prompt's mean prefill alone takes {alone})"
    )


def plan(hardware: Hardware, workload: Workload, step_tokens: int) -> PlanReport:
    """Optimise PrfaaS-PD and evaluate the baselines on one stage model."""
    splits = hardware.pd_splits(hardware.pd.num_gpus)
    if not splits:
        raise InfeasiblePlanError("pd: PrfaaS-PD needs at least 2 PD instances (1 PD-P, 1 PD-D)")
    model = StageModel.build(hardware, workload, step_tokens)
    n_prfaas = hardware.prfaas.num_instances
    (n_p, n_d), k = best_split(model, n_prfaas, splits)
    prfaas_pd = _served(operating_point(model, n_prfaas, n_p, n_d, k, has_threshold=True), model)

    same_gpus = hardware.prfaas.num_gpus + hardware.pd.num_gpus
    same_price_gpus = int(prfaas_pd.price // hardware.pd.profile.chip.relative_price)
    num_decoders = hardware.decode_cluster.num_instances
    deployments = {
        "prfaas_pd": prfaas_pd,
        "homogeneous_pd": _homogeneous(model, same_gpus),
        "naive_heterogeneous": operating_point(
            model, n_prfaas, 0, num_decoders, 0, has_threshold=False
        ),
        "equal_cost_homogeneous": _homogeneous(model, same_price_gpus),
    }
    sweep = []
    for sweep_n_p, sweep_n_d in splits:
        _, sweep_k = best_split(model, n_prfaas, [(sweep_n_p, sweep_n_d)])
        point = operating_point(model, n_prfaas, sweep_n_p, sweep_n_d, sweep_k, has_threshold=True)
        sweep.append(point)
    return PlanReport(
        deployments=deployments,
        n_p_sweep=tuple(sweep),
        threshold_sweep=threshold_sweep(model, n_prfaas, n_p, n_d),
        decode=model.decode,
        workload=workload,
        warnings=fit_warnings(hardware),
    )
