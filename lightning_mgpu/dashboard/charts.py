"""The dashboard's chart model: what a chart shows, independent of what draws it (Plotly in the page,
:mod:`lightning_mgpu.dashboard.figures`; matplotlib for PNG, :mod:`lightning_mgpu.dashboard.png`).

The pages (:mod:`lightning_mgpu.dashboard.render`, :mod:`lightning_mgpu.dashboard.compare`) build these from runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lightning_mgpu.dashboard.reader import Point

#: Colours by device index (matplotlib's tab10), so a device has one colour in every chart.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TOTAL_COLOR = "#222222"
SEGMENT_COLORS = {"data wait": "#d62728", "communication": "#ff7f0e", "compute": "#2ca02c"}
#: Shading of the time line's phases (training itself is left plain).
PHASE_COLORS = {"validation": "#4c78a8", "checkpoint": "#f58518"}
TIME_AXIS = "seconds since the first sample"
MAX_MARKERS = 60


@dataclass
class Line:
    """One series of a line chart; ``band`` is an optional ``(x, low, high)`` envelope (min/max)."""

    key: str
    label: str
    points: list[Point]
    color: str
    dashed: bool = False
    band: list[tuple[float, float, float]] | None = None


@dataclass
class LineChart:
    id: str
    title: str
    y_label: str
    lines: list[Line]
    y_min: float | None = None
    y_max: float | None = None
    x_label: str = "step"
    #: ``(start, stop, phase)`` stretches of the x axis to shade (the time line's validation and checkpoint saves).
    shading: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass
class Segment:
    label: str
    color: str
    values: list[float]


@dataclass
class StackedBarChart:
    """Horizontal bars, one per category (device), split into segments that add up to ``total``."""

    id: str
    title: str
    categories: list[str]
    segments: list[Segment]
    x_label: str = "% of training step time (mean over the run)"
    total: float = 100.0


Chart = LineChart | StackedBarChart


@dataclass
class Section:
    id: str
    title: str
    charts: list[Chart] = field(default_factory=list)
    note: str | None = None
    #: ``(label, href)``: files the section offers beside its charts (the time line's CSV and Parquet).
    links: list[tuple[str, str]] = field(default_factory=list)


def fmt(value: float) -> str:
    """A short, readable number (``87.5``, ``0.0123``, ``12,345``)."""
    if value == 0 or not math.isfinite(value):
        return str(0 if value == 0 else value)
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def extent(chart: LineChart) -> tuple[float, float, float, float]:
    """The axes' ranges ``(x0, x1, y0, y1)`` that show every point and band of ``chart``, with headroom on top."""
    xs = [x for line in chart.lines for x, _ in line.points]
    ys = [y for line in chart.lines for _, y in line.points]
    ys += [v for line in chart.lines for _, lo, hi in (line.band or []) for v in (lo, hi)]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    y0 = chart.y_min if chart.y_min is not None else min(ys)
    y1 = chart.y_max if chart.y_max is not None else max(ys)
    if chart.y_max is None:
        # Headroom above the highest point, so the top line never sits on (or above) the axis' last tick.
        y1 = y1 + 0.12 * ((y1 - y0) or abs(y1) or 1.0)
    elif ys and max(ys) >= y1:
        # A fixed top (100 %) that the data reaches (a process using more than one core): the data wins.
        y1 = max(ys) + 0.06 * ((max(ys) - y0) or 1.0)
    if y1 <= y0:
        y1 = y0 + 1.0
    return x0, x1, y0, y1
