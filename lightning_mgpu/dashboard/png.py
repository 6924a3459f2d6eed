"""PNG images of the chart model, drawn by matplotlib (imported here only, when images are asked for)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_mgpu.dashboard.charts import (
    MAX_MARKERS,
    PHASE_COLORS,
    LineChart,
    Section,
    StackedBarChart,
    extent,
    fmt,
)
from lightning_mgpu.utilities.files import atomic_write
from lightning_mgpu.utilities.imports import require


def render_pngs(sections: Sequence[Section], out_dir: Path) -> dict[str, Path]:
    """Draw every chart with matplotlib into ``out_dir/<chart id>.png``.

    Raises:
        MissingDependencyError: matplotlib is not installed (the ``dashboard`` extra).
    """
    require("matplotlib", "the dashboard's PNG images")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written: dict[str, Path] = {}
    for chart in (c for s in sections for c in s.charts):
        rows = len(chart.categories) if isinstance(chart, StackedBarChart) else 0
        fig = Figure(figsize=(7.6, 3.2 if not rows else 1.2 + 0.5 * rows), dpi=110)
        FigureCanvasAgg(fig)  # the Agg canvas draws without pyplot's global state or a display
        ax = fig.add_subplot()
        if isinstance(chart, LineChart):
            _mpl_lines(ax, chart)
        else:
            _mpl_bars(ax, chart)
        ax.set_title(chart.title, fontsize=11, loc="left")
        ax.set_axisbelow(True)
        ax.grid(True, color="#eceff4", axis="x" if rows else "both")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        fig.tight_layout()
        path = out_dir / f"{chart.id}.png"
        atomic_write(path, functools.partial(fig.savefig, format="png"))
        written[chart.id] = path
    return written


def _mpl_lines(ax: Any, chart: LineChart) -> None:
    for line in chart.lines:
        xs, ys = zip(*line.points)
        if line.band:
            bx, lo, hi = zip(*line.band)
            ax.fill_between(bx, lo, hi, color=line.color, alpha=0.14, linewidth=0)
        ax.plot(
            xs,
            ys,
            color=line.color,
            linestyle="--" if line.dashed else "-",
            linewidth=1.6,
            label=line.label,
            marker="o" if len(xs) <= MAX_MARKERS else None,
            markersize=3,
        )
    for phase in dict.fromkeys(phase for *_, phase in chart.shading):
        for i, (start, stop, _) in enumerate(s for s in chart.shading if s[2] == phase):
            color = PHASE_COLORS.get(phase, "#999999")
            ax.axvspan(start, stop, color=color, alpha=0.16, linewidth=0, label=f"{phase} (shaded)" if i == 0 else None)
    from matplotlib.ticker import MaxNLocator

    if chart.x_label == "step":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel(chart.y_label)
    x0, x1, y0, y1 = extent(chart)
    if len({x for line in chart.lines for x, _ in line.points}) == 1:
        ax.set_xlim(x0, x1)  # one logged step: show it mid-axis
    ax.set_ylim(y0, y1)


def _mpl_bars(ax: Any, chart: StackedBarChart) -> None:
    left = [0.0] * len(chart.categories)
    ys = list(range(len(chart.categories)))
    for seg in chart.segments:
        bars = ax.barh(ys, seg.values, left=left, color=seg.color, label=seg.label, height=0.6)
        for bar, value in zip(bars, seg.values):
            if value >= 6:
                ax.text(
                    bar.get_x() + bar.get_width() / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{fmt(value)}%",
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=8,
                )
        left = [a + b for a, b in zip(left, seg.values)]
    ax.set_yticks(ys, chart.categories)
    ax.invert_yaxis()
    ax.set_xlim(0, chart.total)
    ax.set_xlabel(chart.x_label)
