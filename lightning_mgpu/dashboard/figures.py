"""Plotly figures of the chart model (:mod:`lightning_mgpu.dashboard.charts`), as the pages embed them."""

from __future__ import annotations

import html
import json
from typing import Any

from lightning_mgpu.dashboard.charts import (
    MAX_MARKERS,
    PHASE_COLORS,
    Chart,
    LineChart,
    StackedBarChart,
    extent,
    fmt,
)
from lightning_mgpu.utilities.imports import require


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[k : k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _line_figure(chart: LineChart) -> Any:
    go = require("plotly", "the dashboard").graph_objects
    fig = go.Figure()
    for line in chart.lines:
        xs, ys = [x for x, _ in line.points], [y for _, y in line.points]
        if line.band:
            # The min/max envelope of the window: one closed shape, toggled with its line through the legend group.
            bx = [x for x, _, _ in line.band]
            fig.add_trace(
                go.Scatter(
                    x=bx + bx[::-1],
                    y=[hi for *_, hi in line.band] + [lo for _, lo, _ in line.band][::-1],
                    fill="toself",
                    fillcolor=_rgba(line.color, 0.14),
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=line.key,
                    meta={"band": line.key},
                )
            )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                name=line.label,
                legendgroup=line.key,
                meta={"key": line.key},
                mode="lines+markers" if len(xs) <= MAX_MARKERS else "lines",
                line={"color": line.color, "dash": "dash" if line.dashed else "solid", "width": 1.8},
                marker={"size": 4 if len(xs) > 3 else 8},  # a lone point must show
                hovertemplate="%{y:.4~g}<extra>" + html.escape(line.label) + "</extra>",
            )
        )
    for start, stop, phase in chart.shading:
        fig.add_vrect(
            x0=start,
            x1=max(stop, start + 1e-3),
            fillcolor=PHASE_COLORS.get(phase, "#999999"),
            opacity=0.16,
            line_width=0,
            layer="below",
            name=phase,
        )
    for phase in dict.fromkeys(phase for *_, phase in chart.shading):
        # A legend entry per shaded phase (a shape has none of its own).
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=f"{phase} (shaded)",
                marker={"size": 11, "symbol": "square", "color": _rgba(PHASE_COLORS.get(phase, "#999999"), 0.35)},
                meta={"phase": phase},
                hoverinfo="skip",
            )
        )
    _x0, _x1, y0, y1 = extent(chart)
    fig.update_layout(
        xaxis={"title": {"text": chart.x_label}, "rangemode": "tozero" if chart.x_label == "step" else "normal"},
        yaxis={"title": {"text": chart.y_label}, "range": [y0, y1]},
        hovermode="x unified",
    )
    return fig


def _bar_figure(chart: StackedBarChart) -> Any:
    go = require("plotly", "the dashboard").graph_objects
    fig = go.Figure()
    for seg in chart.segments:
        fig.add_trace(
            go.Bar(
                y=list(chart.categories),
                x=list(seg.values),
                name=seg.label,
                orientation="h",
                marker={"color": seg.color},
                meta={"segment": seg.label},
                text=[f"{fmt(v)}%" if v >= 6 else "" for v in seg.values],
                textposition="inside",
                hovertemplate="%{y} " + html.escape(seg.label) + ": %{x:.3~g}%<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        xaxis={"title": {"text": chart.x_label}, "range": [0, chart.total]},
        yaxis={"autorange": "reversed"},
    )
    return fig


def figure_json(chart: Chart) -> dict[str, Any]:
    """One chart as a Plotly figure (``{"data": [...], "layout": {...}}``), ready for ``Plotly.react``.

    Each line trace carries the metric key it plots in ``meta.key`` (bars: ``meta.segment``), so a test or a
    script can read the values back from the page.

    Raises:
        MissingDependencyError: plotly is not installed (the ``dashboard`` extra).
    """
    fig = _line_figure(chart) if isinstance(chart, LineChart) else _bar_figure(chart)
    rows = len(chart.categories) if isinstance(chart, StackedBarChart) else 0
    fig.update_layout(
        template="plotly_white",
        height=320 if not rows else 140 + 46 * rows,
        margin={"l": 64, "r": 16, "t": 12, "b": 44},
        legend={"orientation": "h", "y": -0.22, "font": {"size": 11}},
        font={"size": 12},
        # Keeps the user's zoom and legend toggles when the live view replaces the data.
        uirevision=chart.id,
    )
    plotly = require("plotly", "the dashboard")
    return json.loads(json.dumps(fig.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder))
