"""PNG plots of a simulation: link and queue timelines, and TTFT per policy. matplotlib is
imported here only, and only when plots are asked for."""

from __future__ import annotations

from pathlib import Path

from prfaas.sim.report import SimReport
from prfaas.sim.sweep import SweepRow, saturation


def write_plots(reports: list[SimReport], plot_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(4, 1, figsize=(8, 9), sharex=True)
    for report in reports:
        tl = report.timeline
        axes[0].plot(tl.time_s, tl.link_egress_gbps, label=f"{report.policy} egress")
        axes[1].plot(tl.time_s, tl.link_backlog_gb, label=report.policy)
        queued = [a + b for a, b in zip(tl.prfaas_queue, tl.pd_prefill_queue, strict=True)]
        axes[2].plot(tl.time_s, queued, label=report.policy)
        axes[3].plot(tl.time_s, [t / 1000 for t in tl.threshold_tokens], label=f"{report.policy} t")
        axes[3].plot(tl.time_s, tl.num_pd_prefill, ":", label=f"{report.policy} N_p")
    if reports:
        tl = reports[0].timeline
        axes[0].plot(tl.time_s, tl.link_capacity_gbps, "k--", label="capacity")
    labels = ["link (Gbps)", "backlog (GB)", "queued prefills", "t (K tokens) / N_p"]
    for ax, label in zip(axes, labels, strict=True):
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    axes[-1].set_xlabel("simulated time (s)")
    fig.tight_layout()
    timeline_path = plot_dir / "timelines.png"
    fig.savefig(timeline_path, dpi=80)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [r.policy for r in reports]
    ax.bar([n + " mean" for n in names], [r.summary.ttft_s.mean or 0 for r in reports])
    ax.bar([n + " P90" for n in names], [r.summary.ttft_s.p90 or 0 for r in reports])
    ax.set_ylabel("TTFT (s)")
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    fig.tight_layout()
    ttft_path = plot_dir / "ttft.png"
    fig.savefig(ttft_path, dpi=80)
    plt.close(fig)
    return [timeline_path, ttft_path]


def write_sweep_plot(rows: list[SweepRow], plot_dir: Path) -> Path:
    """Goodput and P90 TTFT against the offered rate, one line per policy; the dotted line is
    the homogeneous deployment's saturation rate when it is in the sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for policy in dict.fromkeys(r.policy for r in rows):
        mine = sorted((r for r in rows if r.policy == policy), key=lambda r: r.offered_per_s)
        x = [r.offered_per_s for r in mine]
        axes[0].plot(x, [r.goodput_per_s or 0 for r in mine], "o-", label=policy, ms=3)
        axes[1].plot(x, [r.ttft_p90_s or 0 for r in mine], "o-", label=policy, ms=3)
    sat = saturation(rows).get("homogeneous")
    for ax in axes:
        if sat is not None:
            ax.axvline(sat[0], color="k", ls=":", lw=1, label="homogeneous saturation")
        ax.set_xlabel("offered rate (req/s)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("goodput (req/s)")
    axes[1].set_ylabel("TTFT P90 (s)")
    axes[1].set_yscale("log")
    fig.tight_layout()
    path = plot_dir / "sweep.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
