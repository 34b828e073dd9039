"""The gap between prfaas's homogeneous-PD plan and aiconfigurator's disaggregated plan, cell by
cell, as a product of factors (issue 30; called by `aic_side_by_side.py`, results in
docs/benchmarks.md).

Both sides use aiconfigurator's kernel data, so a difference is one of: a fixed factor, how a
configuration is timed, how large a decode batch may be, how the GPUs are split, the queueing
our TTFT objective charges, or the shapes searched. We walk from aiconfigurator's chosen
configuration to ours one change at a time, each step evaluated, so the ratio ours / theirs is
exactly the product of the steps:

    aic       its row: per-worker rates x its fixed factors (below), one replica
    fixed     the same workers, batches and counts with the fixed factors removed: its
              latency corrections (prefill x 1.1, decode x 1.08, `Task.prefill_latency_
              correction` / `decode_latency_correction`) and rate matching (x 0.9, x 0.92)
    timing    the same, every worker timed by prfaas's `AicProfile` (prefill of one prompt
              over dp, a decode step at the mean context ISL + OSL / 2)
    split     its shapes and decode batch, our split of all the GPUs (`Hardware.pd_splits`)
              instead of its replica (replica sizes 1, 2, 4, 8, 16, 24, ...)
    pick      the largest decode batch its own rule allows that shape (TPOT x 1.08 under the
              target, its batch grid; within our memory bound): what its rate matching left
    batch     its shapes, our decode batch (BS_max: TPOT at the mean context, our memory model)
    queue     the same with our TTFT objective (`planner.queueing`): our plan for its shapes
    shape     our shapes (the parallelism search): our plan

and the other way round, our configuration as aiconfigurator's `cli_estimate` evaluates it
(with its fixed factors): whether its TPOT, its 1.8 x TTFT filter and its memory accept it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, replace
from typing import Any

from prfaas.planner.errors import InfeasiblePlanError
from prfaas.planner.model import Cluster, Hardware
from prfaas.planner.parallel import SearchedPlan
from prfaas.planner.plan import plan
from prfaas.specs.aic import aic_factors
from prfaas.specs.memory import instance_memory, startup_rule
from prfaas.specs.perf import PerfProfile
from prfaas.specs.timing import Parallelism, TimingChoice, time_instance
from prfaas.workload.workload import Workload

STEPS = ("fixed", "timing", "split", "pick", "batch", "queue", "shape")
#: aiconfigurator's decode batch grid per attention-DP rank
#: (`DisaggInferenceSession.find_best_disagg_result_under_constraints`, max 512).
AIC_DECODE_BATCHES = (
    *range(1, 16),
    *range(16, 32, 2),
    *range(32, 128, 4),
    *range(128, 512, 8),
    512,
)


def aic_constants() -> dict[str, float]:
    """aiconfigurator's fixed factors, read from the installed package (`specs.aic`)."""
    factors = aic_factors()
    if isinstance(factors, str):
        raise RuntimeError(factors)
    return {k: v for k, v in asdict(factors).items() if k != "version"}


def _split(row: dict[str, Any], role: str) -> Parallelism | None:
    """Our Parallelism for aiconfigurator's (tp, dp, moe_tp, moe_ep) of one role; None for a
    shape we cannot express (pipeline or context parallelism)."""
    if int(row[f"({role})pp"]) != 1 or int(row.get(f"({role})cp") or 1) != 1:
        return None
    tp, dp = int(row[f"({role})tp"]), int(row[f"({role})dp"])
    ep = int(row[f"({role})moe_ep"] or 1)
    return Parallelism(tp=tp, ep=ep, dp=dp)


def _decode_rate(profile: PerfProfile, batch: int, workload: Workload) -> float:
    """Requests/s of one decode instance at `batch`, its step at the mean decode context."""
    step_s = profile.decode_step_s(batch, round(workload.mean_decode_context_tokens))
    return batch / (step_s * workload.mean_output_tokens)


def _best_split(hardware: Hardware, num_gpus: int, p_rate: float, d_rate: float) -> float:
    """Our best (N_p, N_d) on `num_gpus` at fixed per-instance rates: its req/s."""
    return max(min(n_p * p_rate, n_d * d_rate) for n_p, n_d in hardware.pd_splits(num_gpus))


def _aic_batch_bound(
    profile: PerfProfile, split: Parallelism, workload: Workload, tpot_s: float, bound: int | None
) -> int:
    """The largest decode batch aiconfigurator's own rule allows this shape: a per-rank batch
    on its grid whose TPOT, times its decode latency correction, is under the target (and
    within our memory bound `bound`, so only its TPOT rule differs from ours)."""
    correction = aic_constants()["decode_latency_correction"]
    ctx = round(workload.mean_decode_context_tokens)
    for per_rank in sorted(AIC_DECODE_BATCHES, reverse=True):
        batch = per_rank * split.dp
        if bound is not None and batch > bound:
            continue
        if profile.decode_step_s(batch, ctx) * correction < tpot_s:
            return batch
    return 1


def _planned(hardware: Hardware, workload: Workload, num_gpus: int) -> tuple[float, dict[str, Any]]:
    """Our homogeneous-PD plan on `hardware`'s shapes: req/s/GPU and its decode batch."""
    report = plan(hardware, workload, 100)
    decode = report.decode
    return report.deployments["homogeneous_pd"].lambda_max / num_gpus, {
        "batch": decode.max_batch_size,
        "latency_bound": decode.latency_batch_size,
        "memory_bound": decode.memory_batch_size,
    }


def _their_shapes(base: Hardware, row: dict[str, Any], choice: TimingChoice) -> Hardware | None:
    """Our hardware in aiconfigurator's chosen shapes (PD-P, PD-D), timed by our source, no
    TTFT objective; None for a shape we cannot express. The PD cluster keeps `base`'s GPUs:
    homogeneous PD is planned on the PrfaaS and PD clusters' GPUs together (`planner.plan`),
    so the cell's budget is theirs (a PD cluster of the whole budget planned 8 GPUs more)."""
    num_gpus = base.pd.num_gpus
    splits = _split(row, "p"), _split(row, "d")
    if splits[0] is None or splits[1] is None:
        return None
    model, chip = base.pd.profile.model, base.pd.profile.chip
    p_split, d_split = splits
    p_prof, d_prof = (time_instance(model, chip, s, choice).profile for s in splits)
    rule = startup_rule(choice)
    return replace(
        base,
        pd=Cluster(
            p_prof, num_gpus // p_prof.gpus_per_instance, instance_memory(p_prof, p_split.dp, rule)
        ),
        pd_decode=Cluster(
            d_prof, num_gpus // d_prof.gpus_per_instance, instance_memory(d_prof, d_split.dp, rule)
        ),
        ttft_slo_s=None,
    )


def decompose(
    base: Hardware,
    workload: Workload,
    choice: TimingChoice,
    *,
    ours: SearchedPlan,
    theirs: dict[str, Any],
    tpot_s: float,
    num_gpus: int,
) -> dict[str, Any]:
    """The chain of the module docstring for one cell (`theirs`: aiconfigurator's best
    disaggregated row, as `aic_side_by_side._aic_disagg` records it)."""
    row, k = theirs["row"], aic_constants()
    x_p, x_d, replica = row["(p)workers"], row["(d)workers"], row["num_total_gpus"]
    value = {"aic": float(row["seq/s/gpu"])}
    value["fixed"] = (
        min(
            x_p * row["(p)seq/s/worker"] * k["prefill_latency_correction"],
            x_d * row["(d)seq/s/worker"] * k["decode_latency_correction"],
        )
        / replica
    )
    hardware = _their_shapes(base, row, choice)
    if hardware is None:
        return {"values": value, "note": "a shape with pipeline or context parallelism"}
    d_split = _split(row, "d")
    assert d_split is not None  # _their_shapes checked it
    p_prof, d_prof = hardware.pd.profile, hardware.decode_cluster.profile
    # One prefill instance's rate: its concurrent prompts (attention-DP ranks) over one's latency.
    p_rate = p_prof.prefill_concurrency / p_prof.prefill_s(round(workload.mean_input_tokens))
    d_batch = int(row["(d)bs"]) * d_split.dp  # aiconfigurator's batch is per attention-DP rank
    value["timing"] = min(x_p * p_rate, x_d * _decode_rate(d_prof, d_batch, workload)) / replica
    value["split"] = (
        _best_split(hardware, num_gpus, p_rate, _decode_rate(d_prof, d_batch, workload)) / num_gpus
    )
    detail: dict[str, Any] = {"aic_decode_batch": d_batch}
    try:
        value["batch"], detail["ours_decode"] = _planned(hardware, workload, num_gpus)
        value["queue"], _ = _planned(
            replace(hardware, ttft_slo_s=base.ttft_slo_s), workload, num_gpus
        )
    except InfeasiblePlanError as err:
        return {"values": value, "note": str(err), **detail}
    bound = _aic_batch_bound(
        d_prof, d_split, workload, tpot_s, detail["ours_decode"]["memory_bound"]
    )
    detail["aic_rule_batch"] = bound
    value["pick"] = _best_split(hardware, num_gpus, p_rate, _decode_rate(d_prof, bound, workload))
    value["pick"] /= num_gpus
    value["shape"] = ours.report.deployments["homogeneous_pd"].lambda_max / num_gpus
    chain = ["aic", *STEPS]
    factors = {step: value[step] / value[prev] for prev, step in itertools.pairwise(chain)}
    return {"values": value, "factors": factors, **detail}


def estimate_ours(
    ours: SearchedPlan,
    workload: Workload,
    *,
    system: str,
    engine: str,
    slo: dict[str, float],
    num_gpus: int,
) -> dict[str, Any]:
    """Our homogeneous-PD configuration as aiconfigurator evaluates it (`cli_estimate`, its
    fixed factors included): its req/s/GPU over our GPUs and whether it accepts the plan."""
    from aiconfigurator.cli.api import cli_estimate

    from prfaas.specs import aic

    point = ours.report.deployments["homogeneous_pd"]
    p, d = ours.hardware.pd.profile, ours.hardware.decode_cluster.profile
    p_split, d_split = (getattr(prof, "split", None) for prof in (p, d))
    if not isinstance(p_split, Parallelism) or not isinstance(d_split, Parallelism):
        return {"error": "a role is not timed by aiconfigurator"}
    batch = ours.report.decode.max_batch_size
    try:
        result = cli_estimate(
            aic.aic_model_id(p.model) or p.model.name, system, mode="disagg",
            backend_name=engine, isl=round(workload.mean_input_tokens),
            osl=round(workload.mean_output_tokens),
            prefill_tp_size=p_split.tp, prefill_attention_dp_size=p_split.dp,
            prefill_moe_tp_size=p_split.moe_tp, prefill_moe_ep_size=p_split.ep,
            prefill_batch_size=1, prefill_num_workers=point.n_p,
            decode_tp_size=d_split.tp, decode_attention_dp_size=d_split.dp,
            decode_moe_tp_size=d_split.moe_tp, decode_moe_ep_size=d_split.ep,
            decode_batch_size=math.ceil(batch / d_split.dp), decode_num_workers=point.n_d,
        )  # fmt: skip
    except Exception as err:  # its refusals (OOM) are RuntimeErrors, others its own types
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    raw, k = result.raw, aic_constants()
    ttft_ms = float(raw["ttft"])  # includes its 1.8 queueing correction
    return {
        "req_per_s_per_gpu": float(raw["seq/s"]) / num_gpus,
        "tpot_ms": float(raw["tpot"]),
        "meets_tpot": float(raw["tpot"]) < slo["tpot_ms"],
        "ttft_corrected_ms": ttft_ms,
        "meets_ttft": ttft_ms < slo["ttft_ms"],
        "ttft_correction": k["ttft_correction"],
        "memory_gb_per_gpu": {"p": raw["(p)memory"], "d": raw["(d)memory"]},
    }
