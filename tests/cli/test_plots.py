"""Every PNG the CLI writes is readable: a title, axis labels with units, horizontal tick labels
of a readable size, legends that cover no data, log scales where values span decades; the sweep
says "highest load tried" for a policy that never saturated."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from prfaas.planner.plan import plan
from prfaas.planner.plots import fig5a, fig5b
from prfaas.planner.scenario import load_scenario
from prfaas.sim.api import simulate_scenario
from prfaas.sim.plots import sweep_figure, timeline_figure, ttft_figure
from prfaas.sim.sweep import SweepRow

UNIT = re.compile(r"\(.+\)|instances|N_p")
MIN_TICK_PT = 7.0


def _row(policy: str, scale: float, offered: float, done: float) -> SweepRow:
    return SweepRow(scale, offered, policy, 100, done, done, 100, 1.0, 2.0, 3.0, 0.5)


SWEEP = [
    _row("prfaas", 1.0, 2.0, 1.98),
    _row("prfaas", 0.5, 4.0, 3.95),  # follows the offered rate: never saturated
    _row("homogeneous", 1.0, 2.0, 1.97),
    _row("homogeneous", 0.5, 4.0, 2.5),  # falls behind: saturated
]


@pytest.fixture(scope="module")
def figures() -> dict[str, Figure]:
    scenario = load_scenario("paper-case-study")
    report = plan(scenario.hardware, scenario.workload, scenario.threshold_step_tokens)
    runs = [simulate_scenario("paper-case-study-link-drop", p).report for p in ("prfaas", "fixed")]
    built = {
        "fig5a": fig5a(report),
        "fig5b": fig5b(report),
        "timelines": timeline_figure(runs),
        "ttft": ttft_figure(runs),
        "sweep": sweep_figure(SWEEP),
    }
    for fig in built.values():
        FigureCanvasAgg(fig).draw()
    return built


def _data_axes(fig: Figure) -> Iterator[Axes]:
    return (ax for ax in fig.axes if ax.lines or ax.patches)


def _legends(fig: Figure) -> list[Legend]:
    found = [ax.get_legend() for ax in fig.axes]
    return [legend for legend in [*found, *fig.legends] if legend is not None]


@pytest.mark.parametrize("name", ["fig5a", "fig5b", "timelines", "ttft", "sweep"])
def test_titles_labels_units_and_ticks(figures: dict[str, Figure], name: str) -> None:
    fig = figures[name]
    suptitle = fig.get_suptitle()
    for ax in _data_axes(fig):
        assert suptitle or ax.get_title(), f"{name}: no title"
        assert UNIT.search(ax.get_ylabel()), f"{name}: y label {ax.get_ylabel()!r} has no unit"
        if ax.get_xlabel():
            assert UNIT.search(ax.get_xlabel()) or ax.get_xlabel() == "policy"
        for label in [*ax.get_xticklabels(), *ax.get_yticklabels()]:
            assert label.get_fontsize() >= MIN_TICK_PT, f"{name}: tiny tick labels"
            assert label.get_rotation() == 0, f"{name}: rotated tick labels"
    assert any(ax.get_xlabel() for ax in fig.axes), f"{name}: no x label"


@pytest.mark.parametrize("name", ["fig5a", "fig5b", "timelines", "ttft", "sweep"])
def test_legends_cover_no_data(figures: dict[str, Figure], name: str) -> None:
    fig = figures[name]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for line in ax.lines:
                assert isinstance(line, Line2D)
                xy = line.get_xydata()
                if len(xy) == 0:
                    continue
                points = ax.transData.transform(xy)
                inside = [p for p in points if box.contains(p[0], p[1])]
                assert not inside, f"{name}: the legend covers {line.get_label()}"
            for patch in ax.patches:
                if isinstance(patch, Rectangle) and patch.get_height() > 0:
                    extent = patch.get_window_extent(renderer)
                    assert not box.overlaps(extent), f"{name}: the legend covers a bar"


def test_log_scales_where_values_span_decades(figures: dict[str, Figure]) -> None:
    link = figures["timelines"].axes[0]
    assert link.get_yscale() == "log"  # egress of a few Gbps under a 100 Gbps capacity
    assert figures["sweep"].axes[1].get_yscale() == "log"


def test_ttft_bars_carry_their_values(figures: dict[str, Figure]) -> None:
    ax = figures["ttft"].axes[0]
    written = [t.get_text() for t in ax.texts]
    assert len(written) == 8 and all(re.fullmatch(r"\d+\.\d\d", t) for t in written)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["prfaas", "fixed"]


def test_sweep_says_highest_load_tried_when_never_saturated(figures: dict[str, Figure]) -> None:
    texts = [t.get_text() for legend in _legends(figures["sweep"]) for t in legend.get_texts()]
    assert "prfaas: never saturated (highest load tried)" in texts
    assert "homogeneous: saturates at 2.50 req/s" in texts
