"""PNG plots of a simulation: link and queue timelines, TTFT per policy, and a load sweep.

Each plot is built as a matplotlib `Figure` (no pyplot state; saving renders with Agg) by a
`*_figure` function, and written by `write_plots` / `write_sweep_plot`. Every figure has a
title, axis labels with units, legends outside the data (right of the panels or under them),
and a log scale where the values span decades: the link panel (egress of a few Gbps under a
capacity of 100) and the sweep's TTFT. Policies differ by colour and line style, so equal
curves stay visible. matplotlib is imported here only, and only when plots are asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prfaas.sim.report import SimReport
from prfaas.sim.sweep import SweepRow, saturated, saturation

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STYLES = ("-", "--", "-.", ":")
DPI = 120
#: Values under this are drawn at it on the link's log axis (Gbps): an idle link is not -inf.
LINK_FLOOR_GBPS = 0.01
#: A log axis once the largest positive value is this many times the smallest.
LOG_SPAN = 50.0


def _style(i: int) -> str:
    return STYLES[i % len(STYLES)]


def _legend_right(ax: Axes) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)


def timeline_figure(reports: Sequence[SimReport]) -> Figure:
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(10, 11), layout="constrained")
    axes = fig.subplots(5, 1, sharex=True)
    for i, report in enumerate(reports):
        tl, ls, name = report.timeline, _style(i), report.policy
        egress = [max(g, LINK_FLOOR_GBPS) for g in tl.link_egress_gbps]
        axes[0].plot(tl.time_s, egress, ls, lw=1.4, label=f"{name} egress")
        axes[1].plot(tl.time_s, tl.link_backlog_gb, ls, lw=1.4, label=name)
        queued = [a + b for a, b in zip(tl.prfaas_queue, tl.pd_prefill_queue, strict=True)]
        axes[2].plot(tl.time_s, queued, ls, lw=1.2, label=name)
        axes[3].plot(tl.time_s, [t / 1000 for t in tl.threshold_tokens], ls, lw=1.6, label=name)
        axes[4].step(tl.time_s, tl.num_pd_prefill, ls, where="post", lw=1.6, label=f"{name} N_p")
    if reports:
        tl = reports[0].timeline
        axes[0].plot(tl.time_s, tl.link_capacity_gbps, "k", lw=1, alpha=0.6, label="capacity")
    axes[0].set_yscale("log")
    labels = (
        "link egress (Gbps, log)",
        "link backlog (GB)",
        "queued prefills (requests)",
        "threshold t (K tokens)",
        "PD-P instances N_p",
    )
    for ax, label in zip(axes, labels, strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        _legend_right(ax)
    counts = [n for r in reports for n in r.timeline.num_pd_prefill]
    if counts:  # whole instances, with room above and below a flat line
        axes[4].set_ylim(min(counts) - 0.5, max(counts) + 0.5)
    axes[4].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle("Simulation timelines: " + ", ".join(r.policy for r in reports))
    return fig


def ttft_figure(reports: Sequence[SimReport]) -> Figure:
    """Mean, P50, P90 and P99 TTFT per policy, grouped, with the values written on the bars."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(6.0, 2.2 * len(reports) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    stats = ("mean", "median", "p90", "p99")
    names = {"mean": "mean", "median": "P50", "p90": "P90", "p99": "P99"}
    width = 0.8 / len(stats)
    values = [[getattr(r.summary.ttft_s, s) or 0.0 for s in stats] for r in reports]
    for k, stat in enumerate(stats):
        xs = [i + (k - 1.5) * width for i in range(len(reports))]
        ys = [row[k] for row in values]
        bars = ax.bar(xs, ys, width, label=names[stat])
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    positive = [v for row in values for v in row if v > 0]
    if positive and max(positive) / min(positive) > LOG_SPAN:
        ax.set_yscale("log")
    ax.set_xticks(range(len(reports)), [r.policy for r in reports])
    ax.set_xlabel("policy")
    ax.set_ylabel("TTFT (s)")
    ax.set_title("Time to first token by policy")
    ax.margins(y=0.15)
    fig.legend(loc="outside right upper", fontsize=8)
    return fig


def sweep_figure(rows: Sequence[SweepRow]) -> Figure:
    """Goodput and P90 TTFT against the offered rate, one line per policy; a dotted line marks
    each policy's saturation rate, only where it did saturate within the sweep."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.4), layout="constrained")
    axes = fig.subplots(1, 2)
    policies = list(dict.fromkeys(r.policy for r in rows))
    for i, policy in enumerate(policies):
        mine = sorted((r for r in rows if r.policy == policy), key=lambda r: r.offered_per_s)
        x = [r.offered_per_s for r in mine]
        colour = f"C{i}"
        axes[0].plot(x, [r.goodput_per_s or 0 for r in mine], "o" + _style(i), color=colour, ms=4)
        axes[1].plot(x, [r.ttft_p90_s or 0 for r in mine], "o" + _style(i), color=colour, ms=4)
        rate = saturation(rows)[policy][0]
        label = f"{policy}: saturates at {rate:.2f} req/s"
        if not saturated(rows, policy):
            label = f"{policy}: never saturated (highest load tried)"
        axes[0].plot([], [], "o" + _style(i), color=colour, label=label)
        if saturated(rows, policy):
            for ax in axes:
                ax.axvline(rate, color=colour, ls=":", lw=1)
    for ax in axes:
        ax.set_xlabel("offered rate (req/s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("goodput (req/s within the SLO)")
    axes[0].set_title("Goodput")
    axes[1].set_ylabel("TTFT P90 (s, log)")
    axes[1].set_yscale("log")
    axes[1].set_title("P90 time to first token")
    fig.suptitle("Load sweep (dotted: a policy's saturation rate)")
    fig.legend(loc="outside lower center", ncols=min(len(policies), 3), fontsize=8)
    return fig


def write_plots(reports: list[SimReport], plot_dir: Path) -> list[Path]:
    plot_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in (("timelines.png", timeline_figure), ("ttft.png", ttft_figure)):
        path = plot_dir / name
        figure(reports).savefig(path, dpi=DPI)
        written.append(path)
    return written


def write_sweep_plot(rows: list[SweepRow], plot_dir: Path) -> Path:
    plot_dir.mkdir(parents=True, exist_ok=True)
    path = plot_dir / "sweep.png"
    sweep_figure(rows).savefig(path, dpi=DPI)
    return path
