"""The paper's Fig. 5 from a `PlanReport`, as matplotlib figures.

    fig5a  Lambda_max versus N_p (N_d = N - N_p, t re-optimised for each N_p), with the prefill
           bound min(Theta_prfaas / p, Theta_pdp / (1 - p)) and the decode bound Theta_pdd;
    fig5b  at the optimal N_p / N_d, the PrfaaS bound Theta_prfaas / p rising and the PD-P bound
           Theta_pdp / (1 - p) falling with t; they cross at the optimal threshold.

matplotlib is imported here only, lazily by the callers that plot, and through `Figure`
objects (no pyplot state, no backend switch): saving a figure renders it with Agg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from prfaas.planner.plan import PlanReport

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Fig. 5b's threshold axis ends here, as in the paper (t swept 0..60K).
FIG5B_MAX_THRESHOLD_TOKENS = 60_000


def _kilo(tokens: int | None) -> str:
    return "-" if tokens is None else f"{tokens / 1000:.1f}K"


def fig5a(report: PlanReport) -> Figure:
    from matplotlib.figure import Figure

    sweep = report.n_p_sweep
    best = report.deployments["prfaas_pd"]
    n_p = np.array([point.n_p for point in sweep])
    lam = np.array([point.lambda_max for point in sweep])
    decode = np.array([point.theta_pd_d for point in sweep])
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(n_p, lam, color="#9ecae1", label=r"$\Lambda_{max}$ (t optimal per $N_p$)")
    ax.bar([best.n_p], [best.lambda_max], color="#3182bd", label="optimum")
    ax.plot(n_p, decode, "s--", color="#e6550d", label=r"PD-D bound $\Theta_{pdd}$")
    for point in sweep:
        ax.annotate(
            f"t={_kilo(point.threshold_tokens)}\n{point.lambda_max:.2f}",
            (point.n_p, point.lambda_max),
            textcoords="offset points",
            xytext=(0, -12),
            ha="center",
            va="top",
            fontsize=7,
        )
    num_pd = best.n_p + best.n_d
    ax.set_xlabel(rf"PD-P instances $N_p$  ($N_d$ = {num_pd} $-$ $N_p$)")
    ax.set_ylabel("throughput (req/s)")
    ax.set_title(
        f"Fig. 5a: optimum N_p={best.n_p}, N_d={best.n_d}, Lambda_max={best.lambda_max:.2f} req/s"
    )
    ax.set_xticks(n_p)
    ax.set_ylim(0, max(lam.max(), decode[0]) * 1.25)
    ax.legend(loc="upper right", fontsize=8)
    return fig


def fig5b(report: PlanReport) -> Figure:
    from matplotlib.figure import Figure

    sweep = report.threshold_sweep
    best = report.deployments["prfaas_pd"]
    assert best.threshold_tokens is not None  # PrfaaS-PD always has a threshold
    keep = sweep.threshold_tokens <= max(FIG5B_MAX_THRESHOLD_TOKENS, best.threshold_tokens)
    t_k = sweep.threshold_tokens[keep] / 1000
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(t_k, sweep.prfaas_bound[keep], color="#3182bd", label=r"PrfaaS $\Theta_{prfaas}/p$")
    ax.plot(t_k, sweep.pd_p_bound[keep], color="#31a354", label=r"PD-P $\Theta_{pdp}/(1-p)$")
    ax.axhline(sweep.pd_d_bound, color="#e6550d", ls="--", label=r"PD-D $\Theta_{pdd}$")
    ax.plot(
        t_k, sweep.lambda_max[keep], color="black", lw=2.2, alpha=0.35, label=r"$\Lambda_{max}$"
    )
    ax.axvline(best.threshold_tokens / 1000, color="grey", ls=":")
    ax.plot([best.threshold_tokens / 1000], [best.lambda_max], "o", color="black")
    ax.annotate(
        f"t*={best.threshold_tokens / 1000:.1f}K\n{best.lambda_max:.2f} req/s",
        (best.threshold_tokens / 1000, best.lambda_max),
        xytext=(best.threshold_tokens / 1000 + 4, 0.4 * best.lambda_max),
        fontsize=8,
        arrowprops={"arrowstyle": "->", "color": "grey"},
    )
    ax.set_xlabel("threshold t (thousand tokens)")
    ax.set_ylabel("throughput (req/s)")
    ax.set_title(f"Fig. 5b: bounds versus t at N_p={sweep.n_p}, N_d={sweep.n_d}")
    ax.set_xlim(0, t_k.max())
    ax.set_ylim(0, 2.2 * best.lambda_max)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)  # under the axes: no curve hidden
    return fig
