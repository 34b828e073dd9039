"""prfaas beside NVIDIA aiconfigurator (issue 30, docs/benchmarks.md, docs/planner.md). Prints JSON.

    .venv/bin/python benchmarks/aic_side_by_side.py [--engine sglang] [--save out/aic.json]

Three parts, one run, all on aiconfigurator-core's data (`prfaas[aic]`, `make aic`):

1. `prefill`: T_prefill of every catalog model aiconfigurator covers, one instance of 8 x H200
   (TP8, EP8 for MoE), at 1K, 8K, 32K and 128K tokens, under our roofline, aiconfigurator's
   data for each engine, and the paper's Table 3 (T = S_kv / Phi_kv).
2. `homogeneous_vs_disagg`: 3 models (dense, MoE, hybrid) x 2 chips x 2 SLO settings on 64
   GPUs, ISL 8000 / OSL 512: prfaas's homogeneous-PD plan with the parallelism search under
   `--timing aic` and the TTFT objective (`planner.queueing`; a shape per PD role, and beside
   it one shared shape) against aiconfigurator's own disaggregated plan
   (`aiconfigurator.cli.api.cli_default`, its planner package `aiconfigurator`, which `make
   aic` installs beside aiconfigurator-core; without it the row's `aiconfigurator` is an error
   line and only prfaas's side runs). Throughput per GPU of the
   64 side by side, and the gap decomposed cell by cell (`aic_decompose`). Beside it prfaas
   under aiconfigurator's rules: the search with the engine's disaggregation rule
   (`planner.engine_rules`; the unconstrained plan is what the rule removed, if anything) and
   with its margins too (`planner.margins`, read from the upper package).
3. `prfaas_across_clusters`: PrfaaS-PD with a B200 PrfaaS cluster and an H200 PD cluster over
   a 100 Gbps link (the case study's lengths, OSL 1024, 40 tokens/s), searched under aic,
   against aiconfigurator's best single-cluster plan (H200 or B200) at equal price, run at the
   workload's mean input length (it takes one ISL).

`benchmarks/aic_tables.py FILE` renders the `--save`d JSON as the tables of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import replace
from typing import Any

from aic_decompose import aic_constants, decompose, estimate_ours
from prfaas.planner.margins import aic_margins
from prfaas.planner.model import Cluster, Hardware
from prfaas.planner.parallel import SearchedPlan, search_parallelism
from prfaas.specs import aic
from prfaas.specs.catalog import get_chip, get_model, model_names, paper_phi_gbps
from prfaas.specs.memory import instance_memory, startup_rule
from prfaas.specs.perf import RooflineProfile
from prfaas.specs.timing import (
    AicEngine,
    TimingChoice,
    TimingSource,
    default_parallelism,
    time_instance,
)
from prfaas.workload.lengths import FixedLength, TruncatedLognormal
from prfaas.workload.workload import Workload
from provenance import git_sha, host

LENGTHS = (1024, 8192, 32_768, 131_072)
MODELS = (("llama-3.1-70b", "dense"), ("qwen3-235b", "moe"), ("qwen3.5-397b", "hybrid"))
CHIPS = ("h200", "b200")
SLOS = ({"ttft_ms": 5000.0, "tpot_ms": 33.0}, {"ttft_ms": 2000.0, "tpot_ms": 20.0})
TOTAL_GPUS = 64
ISL, OSL = 8000, 512


def _cluster(model: str, chip: str, num_gpus: int, gpus: int, choice: TimingChoice) -> Cluster:
    spec = get_model(model)
    profile = time_instance(spec, get_chip(chip), default_parallelism(spec, gpus), choice).profile
    return Cluster(profile, num_gpus // gpus, instance_memory(profile, rule=startup_rule(choice)))


def prefill_rows(engines: list[AicEngine]) -> list[dict[str, Any]]:
    rows = []
    chip = get_chip("h200")
    for name in model_names():
        spec = get_model(name)
        if aic.aic_model_id(spec) is None:
            continue
        roofline = RooflineProfile(spec, chip, 8)
        for length in LENGTHS:
            row: dict[str, Any] = {"model": name, "length_tokens": length}
            row["roofline_s"] = roofline.prefill_s(length)
            for engine in engines:
                choice = TimingChoice(TimingSource.AIC, engine)
                timed = time_instance(spec, chip, default_parallelism(spec, 8), choice)
                row[f"aic_{engine}_s"] = None if timed.fallback else timed.profile.prefill_s(length)
            paper = paper_phi_gbps(name, "h200", 8, length)
            row["paper_table3_s"] = (
                None if paper is None else spec.cache_bytes(length) * 8 / (paper[0] * 1e9)
            )
            rows.append(row)
    return rows


def _aic_disagg(model: str, system: str, gpus: int, engine: str, *, slo: dict[str, float],
                isl: int, osl: int) -> dict[str, Any]:  # fmt: skip
    """aiconfigurator's own best disaggregated (and aggregated) plan, per GPU."""
    try:
        from aiconfigurator.cli.api import cli_default
    except ImportError:
        return {"error": "the aiconfigurator package is not importable (module docstring)"}
    logging.disable(logging.WARNING)
    result = cli_default(aic.aic_model_id(get_model(model)) or model, gpus, system,
                         backend=engine, isl=isl, osl=osl, ttft=slo["ttft_ms"],
                         tpot=slo["tpot_ms"], top_n=1)  # fmt: skip
    out: dict[str, Any] = {}
    for mode, frame in result.best_configs.items():
        if len(frame) == 0:
            out[mode] = None
            continue
        best = frame.iloc[0]
        keys = ("(p)parallel", "(d)parallel", "parallel")
        parallel = {k: str(best[k]) for k in keys if k in best}
        workers = {k: float(best[k]) for k in ("(p)workers", "(d)workers") if k in best}
        out[mode] = {
            "row": {k: _plain(best[k]) for k in ROW_KEYS if k in best},
            "req_per_s_per_gpu": float(best["seq/s/gpu"]),
            "ttft_ms": float(best["ttft"]),
            "tpot_ms": float(best["tpot"]),
            "parallel": parallel,
            "workers": workers,
        }
    return out


#: What the decomposition (`aic_decompose`) reads from aiconfigurator's disaggregated row.
ROW_KEYS = (
    *(f"({role}){key}" for role in "pd" for key in ("tp", "pp", "dp", "moe_tp", "moe_ep", "cp",
                                                    "bs", "workers", "seq/s/worker", "memory")),
    "seq/s/gpu", "num_total_gpus", "ttft", "tpot",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """A pandas cell as a JSON value (numpy scalars to Python, NaN to None)."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def _progress(*what: object) -> None:
    print("done:", *what, file=sys.stderr, flush=True)


def _summary(found: SearchedPlan) -> dict[str, Any]:
    """prfaas's searched homogeneous-PD plan on all TOTAL_GPUS (per GPU of the budget: with a
    shape per role, GPUs neither shape divides stay idle and still count)."""
    point = found.report.deployments["homogeneous_pd"]
    ruled_out = found.ruled_out
    removed = None if ruled_out is None else {
        "req_per_s_per_gpu": ruled_out.report.deployments["homogeneous_pd"].lambda_max / TOTAL_GPUS,
        "refusal": ruled_out.refusal,
    }  # fmt: skip
    return {
        "req_per_s_per_gpu": point.lambda_max / TOTAL_GPUS,
        "n_p": point.n_p, "n_d": point.n_d, "num_gpus_used": point.num_gpus,
        "bottleneck": str(point.bottleneck), "ttft_mean_s": point.ttft_mean_s,
        "theta_pd_p": point.theta_pd_p, "theta_pd_d": point.theta_pd_d,
        "decode_batch": found.report.decode.max_batch_size,
        "decode_step_ms": found.report.decode.step_s * 1e3,
        "pd_p_timing": found.hardware.pd.profile.source,
        "pd_d_timing": found.hardware.decode_cluster.profile.source,
        "pd_p_shape": found.hardware.pd.split.label(),
        "pd_d_shape": found.hardware.decode_cluster.split.label(),
        "ruled_out": removed,
    }  # fmt: skip


def _unconstrained(ruled: SearchedPlan) -> SearchedPlan:
    """The best plan with no engine rule: the one the rule removed, if it was better."""
    removed = ruled.ruled_out
    if removed is None:
        return ruled
    return SearchedPlan(removed.report, removed.hardware, ruled.num_candidates, ruled.timing_notes)


def _searches(
    hardware: Hardware, workload: Workload, choice: TimingChoice
) -> dict[str, SearchedPlan | str]:
    """prfaas's homogeneous-PD plans of one cell: unconstrained (a shape per PD role, and one
    PD shape), under the engine's rule, and under the rule with aiconfigurator's margins."""

    def search(hw: Hardware, *, per_role_pd: bool = True, rules: bool = True) -> SearchedPlan:
        return search_parallelism(
            hw, workload, 100, choice, "homogeneous_pd", per_role_pd=per_role_pd,
            engine_rules=rules,
        )  # fmt: skip

    ruled = search(hardware)
    margins = aic_margins()
    return {
        "prfaas_homogeneous": _unconstrained(ruled),
        "prfaas_one_pd_shape": search(hardware, per_role_pd=False, rules=False),
        "prfaas_engine_rule": ruled,
        "prfaas_under_rules": (
            margins if isinstance(margins, str) else search(replace(hardware, margins=margins))
        ),
    }


def homogeneous_rows(engine: AicEngine, models: set[str]) -> list[dict[str, Any]]:
    choice = TimingChoice(TimingSource.AIC, engine)
    workload = Workload.synthetic(FixedLength(ISL), FixedLength(OSL), f"ISL {ISL} / OSL {OSL}")
    rows = []
    for model, family in MODELS:
        if model not in models:
            continue
        for chip in CHIPS:
            for slo in SLOS:
                hardware = Hardware(
                    prfaas=_cluster(model, chip, 8, 8, choice),
                    pd=_cluster(model, chip, TOTAL_GPUS - 8, 8, choice),
                    link_gbps=100,
                    decode_slo_tokens_per_s=1e3 / slo["tpot_ms"],
                    ttft_slo_s=slo["ttft_ms"] / 1e3,
                )
                found = _searches(hardware, workload, choice)
                system = aic.aic_system(get_chip(chip)) or chip
                theirs = _aic_disagg(
                    model, system, TOTAL_GPUS, str(engine), slo=slo, isl=ISL, osl=OSL
                )
                ours = found["prfaas_homogeneous"]
                assert isinstance(ours, SearchedPlan)
                gap = (
                    {"error": "no aiconfigurator disaggregated plan"}
                    if not theirs.get("disagg")
                    else decompose(
                        hardware, workload, choice, ours=ours, theirs=theirs["disagg"],
                        tpot_s=slo["tpot_ms"] / 1e3, num_gpus=TOTAL_GPUS,
                    )
                )  # fmt: skip
                as_aic = estimate_ours(
                    ours, workload, system=system, engine=str(engine), slo=slo, num_gpus=TOTAL_GPUS
                )
                _progress(model, chip, slo, json.dumps({"decomposition": gap, "as_aic": as_aic}))
                rows.append({
                    "model": model, "family": family, "chip": chip, "slo": slo,
                    **{
                        label: {"error": plan} if isinstance(plan, str) else _summary(plan)
                        for label, plan in found.items()
                    },
                    "aiconfigurator": theirs, "decomposition": gap, "ours_as_aic_evaluates": as_aic,
                })  # fmt: skip
    return rows


def across_clusters_rows(engine: AicEngine) -> list[dict[str, Any]]:
    choice = TimingChoice(TimingSource.AIC, engine)
    workload = Workload.synthetic(
        TruncatedLognormal(9.9, 1.0, 128, 131_072), FixedLength(1024), "case-study lengths"
    )
    rows = []
    for model, family in MODELS:
        hardware = Hardware(
            prfaas=_cluster(model, "b200", 16, 8, choice),
            pd=_cluster(model, "h200", 48, 8, choice),
            link_gbps=100,
            decode_slo_tokens_per_s=40,
        )
        found = search_parallelism(hardware, workload, 100, choice, "prfaas_pd")
        point = found.report.deployments["prfaas_pd"]
        isl = round(workload.mean_input_tokens)
        slo = {"ttft_ms": 60_000.0, "tpot_ms": 25.0}
        single = {}
        for chip in ("h200",):  # the PD cluster's chip (a B200 cluster: one more slow search)
            gpus = int(point.price // get_chip(chip).relative_price)
            system = aic.aic_system(get_chip(chip)) or chip
            theirs = _aic_disagg(model, system, gpus, str(engine), slo=slo, isl=isl, osl=1024)
            single[chip] = {"gpus": gpus} | theirs
            _progress(model, chip, gpus)
        rows.append({
            "model": model, "family": family, "price": point.price,
            "prfaas_pd": {
                "req_per_s": point.lambda_max, "num_gpus": point.num_gpus,
                "threshold_tokens": point.threshold_tokens, "n_prfaas": point.n_prfaas,
                "n_p": point.n_p, "n_d": point.n_d, "bottleneck": str(point.bottleneck),
                "egress_gbps": point.egress_gbps,
                "prfaas_timing": found.hardware.prfaas.profile.source,
                "pd_p_timing": found.hardware.pd.profile.source,
                "pd_d_timing": found.hardware.decode_cluster.profile.source,
            },
            "aiconfigurator_single_cluster_at_equal_price": single,
            "aic_isl_tokens": isl,
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", type=AicEngine, default=AicEngine.SGLANG)
    parser.add_argument("--parts", default="prefill,homogeneous,across")
    parser.add_argument("--save", default=None)
    parser.add_argument("--models", default=",".join(m for m, _ in MODELS), help="homogeneous part")
    args = parser.parse_args()
    if aic.aic_version() is None:
        raise SystemExit("aiconfigurator-core is not installed: make aic")
    parts = set(args.parts.split(","))
    started = time.perf_counter()
    system = aic.aic_system(get_chip("h200")) or "h200_sxm"
    result: dict[str, Any] = {
        "benchmark": "aic_side_by_side",
        "aiconfigurator_core": aic.aic_version(),
        "engine": str(args.engine),
        "data_versions": {str(e): aic.data_version(system, str(e)) for e in AicEngine},
    }
    if "prefill" in parts:
        result["prefill"] = prefill_rows(list(AicEngine))
    if "homogeneous" in parts:
        result["aic_fixed_factors"] = aic_constants()
        result["homogeneous_vs_disagg"] = homogeneous_rows(args.engine, set(args.models.split(",")))
    if "across" in parts:
        result["prfaas_across_clusters"] = across_clusters_rows(args.engine)
    result |= {"wall_s": time.perf_counter() - started, "git_sha": git_sha(), "host": host()}
    text = json.dumps(result, indent=2)
    print(text)
    if args.save:
        with open(args.save, "w") as handle:
            handle.write(text + "\n")


if __name__ == "__main__":
    main()
