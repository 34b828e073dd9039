"""The SLO-capacity sweep as a PNG: goodput, rejection rate and P90 TTFT against offered load,
one line per policy (matplotlib is imported only when the plot is asked for)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prfaas.sim.capacity import CapacityResult, LoadPoint


def write_capacity_plot(
    results: Sequence[CapacityResult], rows: Sequence[LoadPoint], plot_dir: Path
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plot_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for policy in dict.fromkeys(r.policy for r in rows):
        mine = sorted((r for r in rows if r.policy == policy), key=lambda r: r.offered_per_s)
        x = [r.offered_per_s for r in mine]
        (line,) = axes[0].plot(x, [r.goodput_per_s for r in mine], "o-", label=policy, ms=3)
        axes[1].plot(x, [100 * r.rejection_rate for r in mine], "o-", label=policy, ms=3)
        axes[2].plot(x, [r.ttft_p90_s or 0 for r in mine], "o-", label=policy, ms=3)
        capacity = next((c.capacity_per_s for c in results if c.policy == policy), None)
        if capacity is not None:
            axes[0].axvline(capacity, color=line.get_color(), ls=":", lw=1)
    axes[0].set_ylabel("goodput (req/s); dotted: SLO capacity")
    axes[1].set_ylabel("rejected (%)")
    axes[2].set_ylabel("TTFT P90 (s)")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("offered rate (req/s)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = plot_dir / "slo-capacity.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
