"""The markdown tables of docs/benchmarks.md ("prfaas beside aiconfigurator") from the JSON of
one `aic_side_by_side.py --save FILE` run, so every table in the docs comes from one run.

    .venv/bin/python benchmarks/aic_tables.py out/aic-side-by-side.json

Prints, for each part the run has: the prefill table (`prefill`), the homogeneous table with
prfaas under aiconfigurator's rules beside it and the decomposition table
(`homogeneous_vs_disagg`), and the across-clusters table (`prfaas_across_clusters`), then one
line naming the run (versions, commit, wall time). A value the run did not record is `-`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from typing import Any

Row = dict[str, Any]
DECOMPOSITION_STEPS = ("fixed", "timing", "split", "pick", "batch", "queue", "shape")


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _tokens(length: int) -> str:
    return f"{length // 1024}K" if length % 1024 == 0 else str(length)


def prefill_table(rows: list[Row]) -> str:
    """Prefill time (s) per model and length under each source."""
    keys = ("roofline_s", "aic_sglang_s", "aic_vllm_s", "aic_trtllm_s", "paper_table3_s")
    header = ["model", "tokens", "roofline", "aic SGLang", "aic vLLM", "aic TRT-LLM",
              "paper Table 3"]  # fmt: skip
    body = (
        [r["model"], _tokens(r["length_tokens"]), *(_num(r.get(k)) for k in keys)] for r in rows
    )
    return _table(header, body)


def _slo(row: Row) -> str:
    return f"{row['slo']['ttft_ms'] / 1e3:g} s / {row['slo']['tpot_ms']:g} ms"


def _shapes(plan: Row) -> str:
    """PD-P / PD-D shape of a plan (from the profiles' sources in runs that did not record
    the shapes themselves)."""
    pd_p = plan.get("pd_p_shape") or _shape(plan["pd_p_timing"])
    pd_d = plan.get("pd_d_shape") or _shape(plan["pd_d_timing"])
    return f"{pd_p} / {pd_d}"


def _short(plan: Row | None) -> str:
    """req/s/GPU (PD-P / PD-D shape)."""
    return "-" if not plan or "error" in plan else f"{_num(_per_gpu(plan))} ({_shapes(plan)})"


def _ours(plan: Row | None) -> str:
    """One prfaas plan: req/s/GPU (N_p/N_d, PD-P / PD-D shape, binds; decode batch)."""
    if not plan or "error" in plan:
        return "-" if not plan else f"not run: {plan['error']}"
    return (
        f"{plan['req_per_s_per_gpu']:.3f} ({plan['n_p']}/{plan['n_d']}, {_shapes(plan)}, "
        f"{plan['bottleneck']}; BS {plan['decode_batch']} at {plan['decode_step_ms']:.1f} ms)"
    )


def _theirs(disagg: Row | None) -> str:
    if not disagg:
        return "-"
    row, parallel = disagg["row"], disagg["parallel"]
    return (
        f"{disagg['req_per_s_per_gpu']:.3f} ({parallel['(p)parallel']} x{int(row['(p)workers'])}"
        f" / {parallel['(d)parallel']} x{int(row['(d)workers'])}; BS {int(row['(d)bs'])})"
    )


def _per_gpu(plan: Row | None) -> float | None:
    return None if not plan or "error" in plan else float(plan["req_per_s_per_gpu"])


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or not bottom else top / bottom


def homogeneous_table(rows: list[Row]) -> str:
    """prfaas's homogeneous PD (unconstrained, one PD shape, under aiconfigurator's rules)
    against aiconfigurator's disaggregated plan; the last columns split the ratio under its
    rules into its batch pick (from the decomposition) and the rest."""
    header = [
        "model", "chip", "SLO TTFT / TPOT",
        "prfaas homogeneous PD: req/s/GPU (N_p/N_d, PD-P / PD-D shape, binds; decode batch)",
        "prfaas, one PD shape", "aiconfigurator disagg: req/s/GPU (P x workers / D x workers, "
        "per replica; D batch per attention-DP rank)", "aic agg", "ours / aic disagg",
        "prfaas, engine rule", "prfaas under its rules (engine rule + its margins)",
        "under its rules / aic disagg", "its batch pick", "the rest",
    ]  # fmt: skip
    body = []
    for r in rows:
        aic = r.get("aiconfigurator", {})
        disagg, agg = aic.get("disagg"), aic.get("agg")
        theirs = None if not disagg else float(disagg["req_per_s_per_gpu"])
        ruled = r.get("prfaas_under_rules")
        ratio = _ratio(_per_gpu(ruled), theirs)
        pick = r.get("decomposition", {}).get("factors", {}).get("pick")
        body.append([
            f"{r['model']} ({r['family']})", r["chip"], _slo(r), _ours(r["prfaas_homogeneous"]),
            _short(r["prfaas_one_pd_shape"]),
            _theirs(disagg), _num(None if not agg else agg["req_per_s_per_gpu"]),
            _num(_ratio(_per_gpu(r["prfaas_homogeneous"]), theirs), ".2f"),
            _short(r.get("prfaas_engine_rule")),
            _ours(ruled), _num(ratio, ".2f"), _num(pick), _num(_ratio(ratio, pick)),
        ])  # fmt: skip
    return _table(header, body)


def _as_aic(evaluated: Row) -> str:
    """Our configuration as aiconfigurator evaluates it."""
    if "error" in evaluated:
        error = str(evaluated["error"])
        return "refused: OOM" if "OOM" in error else f"refused: {error[:60]}"
    tpot = "meets" if evaluated["meets_tpot"] else "misses"
    ttft = "meets" if evaluated["meets_ttft"] else "misses"
    return (
        f"{evaluated['req_per_s_per_gpu']:.3f}, {evaluated['tpot_ms']:.1f} ms ({tpot}), "
        f"{evaluated['ttft_corrected_ms'] / 1e3:.2f} s ({ttft})"
    )


def decomposition_table(rows: list[Row]) -> str:
    """ours / aiconfigurator as the product of the steps of `aic_decompose`."""
    header = [
        "model", "chip", "SLO", "ours / aic", "fixed factors", "timing", "split",
        "its batch pick", "batch (ours vs its rule)", "queueing", "shapes",
        "D batch per instance on its D shape: its / its rule's / ours",
        "ours as aic evaluates it: req/s/GPU, TPOT, 1.8 x TTFT",
    ]  # fmt: skip
    body = []
    for r in rows:
        gap = r.get("decomposition", {})
        head = [r["model"], r["chip"], _slo(r)]
        if "factors" not in gap:
            body.append([*head, str(gap.get("note") or gap.get("error") or "-")] + ["-"] * 9)
            continue
        values, factors = gap["values"], gap["factors"]
        batches = (
            f"{gap['aic_decode_batch']} / {gap['aic_rule_batch']} / {gap['ours_decode']['batch']}"
        )
        body.append([
            *head, f"{values['shape'] / values['aic']:.2f}",
            *(f"{factors[step]:.3f}" for step in DECOMPOSITION_STEPS), batches,
            _as_aic(r.get("ours_as_aic_evaluates", {"error": "-"})),
        ])  # fmt: skip
    return _table(header, body)


def _shape(source: str) -> str:
    """The split label at the end of an aiconfigurator profile's source, else the source."""
    return source.rsplit(", ", 1)[1].rstrip(")") if source.startswith("aiconfigurator") else source


def _best_single(single: Row) -> tuple[str, float | None]:
    """aiconfigurator's best single-cluster plan at equal price: its description and req/s."""
    best: tuple[str, float | None] = ("-", None)
    for chip, modes in single.items():
        for mode in ("agg", "disagg"):
            plan = modes.get(mode)
            if not plan:
                continue
            req_s = plan["req_per_s_per_gpu"] * modes["gpus"]
            if best[1] is None or req_s > best[1]:
                best = (f"{modes['gpus']} {chip.upper()}, {mode}", req_s)
    return best


def across_table(rows: list[Row]) -> str:
    header = [
        "model", "PrfaaS-PD: t, N_prfaas/N_p/N_d, binds, egress; shapes PrfaaS / PD-P / PD-D",
        "req/s (req/s/price)", "aiconfigurator single cluster at equal price", "req/s", "ratio",
    ]  # fmt: skip
    body = []
    for r in rows:
        p = r["prfaas_pd"]
        shapes = " / ".join(_shape(p[k]) for k in ("prfaas_timing", "pd_p_timing", "pd_d_timing"))
        what, theirs = _best_single(r["aiconfigurator_single_cluster_at_equal_price"])
        body.append([
            r["model"],
            f"t {p['threshold_tokens']}, {p['n_prfaas']}/{p['n_p']}/{p['n_d']}, binds "
            f"{p['bottleneck']}, egress {p['egress_gbps']:.1f} Gbps; {shapes}",
            f"{p['req_per_s']:.2f} ({p['req_per_s'] / r['price']:.4f})",
            f"{what}, ISL {r['aic_isl_tokens']}", _num(theirs, ".2f"),
            _num(_ratio(p["req_per_s"], theirs), ".2f"),
        ])  # fmt: skip
    return _table(header, body)


PARTS: dict[str, tuple[str, Callable[[list[Row]], str]]] = {
    "prefill": ("Prefill time (s), one instance of 8 x H200, TP8 (EP8 for MoE)", prefill_table),
    "homogeneous_vs_disagg": (
        "prfaas's homogeneous PD against aiconfigurator's disaggregated plan",
        homogeneous_table,
    ),
    "prfaas_across_clusters": ("PrfaaS-PD across two clusters at equal price", across_table),
}


def render(result: Row) -> str:
    """Every table the run has, each under its title, then the line naming the run."""
    parts = []
    for key, (title, table) in PARTS.items():
        if key in result:
            parts.append(f"#### {title}\n\n{table(result[key])}")
        if key == "homogeneous_vs_disagg" and key in result:
            parts.append(f"#### Cell by cell\n\n{decomposition_table(result[key])}")
    parts.append(
        f"aiconfigurator-core {result.get('aiconfigurator_core')}, data "
        f"{result.get('data_versions')}, engine {result.get('engine')}, factors "
        f"{result.get('aic_fixed_factors', '-')}; commit {result.get('git_sha')}, wall "
        f"{_num(result.get('wall_s'), '.0f')} s, host {result.get('host')}"
    )
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", help="the --save file of aic_side_by_side.py")
    args = parser.parse_args()
    with open(args.json_file) as handle:
        print(render(json.load(handle)))


if __name__ == "__main__":
    main()
