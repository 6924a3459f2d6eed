"""A local, self-contained HTML dashboard of a training run (plus PNG images of its charts).

The hosted Neptune dashboards are gone; this renders the same views from files on disk::

    python -m lightning_mgpu dashboard outputs/logs/version_0            # a CSVLogger folder
    python -m lightning_mgpu dashboard .neptune/offline/run__<id>__...    # a NeptuneLogger offline run
    python -m lightning_mgpu dashboard tb_logs/my_model/version_0          # a TensorBoardLogger folder
    python -m lightning_mgpu dashboard RUN --out report/ --no-png
    python -m lightning_mgpu dashboard RUN --serve --port 8050            # live, while training writes

Charts: per-device utilisation and memory over steps, the step-time breakdown (data wait /
compute / communication) per device, throughput (and MFU), the GPU monitor's diagnosis table
(``diagnosis.json`` if the run has one, else computed with
:func:`~lightning_mgpu.monitoring.diagnosis.diagnose` from the last logged values), training
curves, and a table of any other metric.

Charts are Plotly figures (zoom, hover read-outs, legend toggling, one colour per device in every chart).
The page needs no network: plotly.js, the CSS and the figures' JSON are inline
(``<script id="dashboard-data">``; each line trace names its metric key in ``meta.key``), so a test or a
script can read the values back. ``--serve`` (:mod:`lightning_mgpu.dashboard.serve`) serves the same page
live. The PNGs (``<chart id>.png``) are drawn by matplotlib, imported only here.

Default output folder: ``RUN/dashboard`` for a CSV run; for a Neptune offline run
``<neptune data dir>/dashboards/<run folder>``, outside the run folder that ``neptune sync``
deletes after uploading.
"""

from __future__ import annotations

import argparse
import functools
import html
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_mgpu.dashboard.reader import NEPTUNE_KIND, Point, RunData, read_run
from lightning_mgpu.monitoring.diagnosis import (
    Diagnosis,
    diagnose,
    load_diagnoses,
    per_device_from_metrics,
)
from lightning_mgpu.monitoring.keys import (
    COMM_PCT,
    CPU,
    DATA_WAIT_MS,
    DATA_WAIT_PCT,
    GPU,
    MEM_TOTAL_GB,
    MEM_USED_GB,
    MFU,
    RSS_GB,
    SAMPLES_PER_SEC,
    STEP_MS,
    THROUGHPUT,
    TIME,
    UTIL_PCT,
    UTIL_PCT_MAX,
    UTIL_PCT_MIN,
    parse_device_label,
    parse_metric_key,
)
from lightning_mgpu.utilities.files import atomic_write
from lightning_mgpu.utilities.imports import MissingDependencyError, require

log = logging.getLogger(__name__)

#: Colours by device index (matplotlib's tab10), so a device has one colour in every chart.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TOTAL_COLOR = "#222222"
SEGMENT_COLORS = {"data wait": "#d62728", "communication": "#ff7f0e", "compute": "#2ca02c"}
#: Shading of the time line's phases (training itself is left plain).
PHASE_COLORS = {"validation": "#4c78a8", "checkpoint": "#f58518"}
TIME_AXIS = "seconds since the first sample"
MAX_MARKERS = 60


# ============================================================================ chart model


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


@dataclass
class DashboardResult:
    """What :func:`render_dashboard` wrote. As the last expression of a notebook cell it shows the page inline."""

    html: Path
    pngs: list[Path]
    run: RunData
    diagnoses: list[Diagnosis]

    def _repr_html_(self) -> str:
        """The page in an ``<iframe srcdoc>``: Jupyter, VS Code and Colab display it as it is in the file (its own
        styles and scripts, plotly.js inlined), where a link to the file would need a server that can reach it."""
        page = self.html.read_text(encoding="utf-8")
        return (
            f'<iframe srcdoc="{html.escape(page, quote=True)}" title="{html.escape(self.html.name)}"'
            ' style="width: 100%; height: 900px; border: 1px solid #d8dee9;"></iframe>'
        )


# ============================================================================ building the charts from a run


def _devices(run: RunData) -> list[str]:
    found = set()
    for key in run.series:
        parsed = parse_metric_key(key)
        if parsed is not None and parsed[1] is not None:
            found.add(parsed[1])
    return sorted(found, key=lambda d: parse_device_label(d) or (10**9, None))


def _color(devices: Sequence[str], device: str) -> str:
    return PALETTE[devices.index(device) % len(PALETTE)]


def _per_device_lines(
    run: RunData, devices: Sequence[str], group: str, name: str, dashed: bool = False, suffix: str = ""
) -> list[Line]:
    lines = []
    for device in devices:
        key = f"{group}/{device}/{name}"
        if run.series.get(key):
            lines.append(Line(key, device + suffix, run.series[key], _color(devices, device), dashed))
    return lines


def _with_band(run: RunData, line: Line, group: str, device: str) -> Line:
    lo = dict(run.series.get(f"{group}/{device}/{UTIL_PCT_MIN}", []))
    hi = dict(run.series.get(f"{group}/{device}/{UTIL_PCT_MAX}", []))
    band = [(x, lo[x], hi[x]) for x, _ in line.points if x in lo and x in hi]
    line.band = band or None
    return line


def _utilisation_section(run: RunData, devices: Sequence[str]) -> Section:
    section = Section("utilisation", "Per-device utilisation and memory")
    for group, title in (
        (GPU, "GPU utilisation (NVML, % of time a kernel ran)"),
        (CPU, "CPU utilisation of the training process"),
    ):
        lines = [_with_band(run, line, group, line.label) for line in _per_device_lines(run, devices, group, UTIL_PCT)]
        if lines:
            top = max(100.0, *(y for line in lines for _, y in line.points))
            section.charts.append(LineChart(f"{group}-utilisation", title, "%", lines, y_min=0.0, y_max=top))
    if not section.charts:
        section.note = (
            "No gpu/rank*/util_pct or cpu/rank*/util_pct metrics: add lightning_mgpu.callbacks.GPUUtilizationMonitor()"
            " to the Trainer's callbacks."
        )
    return section


def _add_memory_charts(section: Section, run: RunData, devices: Sequence[str]) -> Section:
    """Memory over steps joins the utilisation section, so both sit side by side."""
    lines = _per_device_lines(run, devices, GPU, MEM_USED_GB)
    if lines:
        totals = [pts[-1][1] for d in devices if (pts := run.series.get(f"{GPU}/{d}/{MEM_TOTAL_GB}"))]
        if totals:
            xs = [x for line in lines for x, _ in line.points]
            cap = max(totals)
            lines.append(
                Line(
                    f"{GPU}/*/{MEM_TOTAL_GB}",
                    f"capacity ({cap:.1f} GB)",
                    [(min(xs), cap), (max(xs), cap)],
                    TOTAL_COLOR,
                    dashed=True,
                )
            )
        section.charts.append(LineChart("gpu-memory", "GPU memory used (whole device)", "GB", lines, y_min=0.0))
    lines = _per_device_lines(run, devices, CPU, RSS_GB)
    if lines:
        section.charts.append(
            LineChart("cpu-memory", "Resident memory of the training process", "GB", lines, y_min=0.0)
        )
    if section.charts:
        section.note = None
    return section


#: The time line's charts: (chart id, group, quantity, title, unit).
_TIMELINE_CHARTS = (
    ("timeline-gpu-util", GPU, UTIL_PCT, "GPU utilisation over time (NVML, every sample)", "%"),
    ("timeline-cpu-util", CPU, UTIL_PCT, "CPU utilisation of each training process over time", "%"),
    ("timeline-gpu-mem", GPU, MEM_USED_GB, "GPU memory used over time", "GB"),
    ("timeline-cpu-mem", CPU, RSS_GB, "Resident memory of each training process over time", "GB"),
    ("timeline-gpu-power", GPU, "power_w", "GPU power over time", "W"),
)


def timeline_series(run: RunData) -> tuple[dict[str, list[Point]], list[tuple[float, float, str]]]:
    """The time lines as ``key -> [(seconds since the first sample, value)]``, and the shaded phase stretches
    (validation, checkpoint) of the lowest rank, on the same axis."""
    from lightning_mgpu.monitoring.timeline import phase_spans

    points = [p for pts in run.timelines.values() for p in pts]
    if not points:
        return {}, []
    t0 = min(float(p["t"]) for p in points)
    series: dict[str, list[Point]] = {}
    for rank in sorted(run.timelines):
        for point in run.timelines[rank]:
            for key, value in point.get("values", {}).items():
                series.setdefault(key, []).append((float(point["t"]) - t0, float(value)))
    end = max(float(p["t"]) for p in points)
    spans = [
        (start - t0, stop - t0, phase)
        for start, stop, phase in phase_spans(run.timelines[min(run.timelines)], end=end)
        if phase in PHASE_COLORS
    ]
    return series, spans


def _timeline_section(run: RunData) -> Section | None:
    """Every sample of the monitor's background thread over wall time, one line per device, with validation and
    checkpoint saves shaded: where a dip or a stall happened, and during what."""
    series, spans = timeline_series(run)
    if not series:
        return None
    section = Section("timeline", "Over time: every sample, validation and checkpoint saves shaded")
    for chart_id, group, name, title, unit in _TIMELINE_CHARTS:
        keys = sorted(k for k in series if k.startswith(f"{group}/") and k.endswith(f"/{name}"))
        devices = [k.split("/")[1] for k in keys]
        lines = [
            Line(k, d, sorted(series[k]), PALETTE[i % len(PALETTE)]) for i, (k, d) in enumerate(zip(keys, devices))
        ]
        if not lines:
            continue
        top = max(100.0, *(y for line in lines for _, y in line.points)) if name == UTIL_PCT else None
        section.charts.append(
            LineChart(chart_id, title, unit, lines, y_min=0.0, y_max=top, x_label=TIME_AXIS, shading=spans)
        )
    return section if section.charts else None


def _mean(points: Sequence[Point]) -> float:
    return sum(y for _, y in points) / len(points) if points else 0.0


def _step_time_section(run: RunData, devices: Sequence[str]) -> Section:
    section = Section("step-time", "Step-time breakdown")
    timed = [
        d for d in devices if run.series.get(f"{TIME}/{d}/{DATA_WAIT_PCT}") or run.series.get(f"{TIME}/{d}/{COMM_PCT}")
    ]
    if timed:
        wait = [min(100.0, max(0.0, _mean(run.series.get(f"{TIME}/{d}/{DATA_WAIT_PCT}", [])))) for d in timed]
        comm = [
            min(100.0 - w, max(0.0, _mean(run.series.get(f"{TIME}/{d}/{COMM_PCT}", [])))) for d, w in zip(timed, wait)
        ]
        compute = [max(0.0, 100.0 - w - c) for w, c in zip(wait, comm)]
        segments = [
            Segment("data wait", SEGMENT_COLORS["data wait"], wait),
            Segment("communication", SEGMENT_COLORS["communication"], comm),
            Segment("compute", SEGMENT_COLORS["compute"], compute),
        ]
        section.charts.append(
            StackedBarChart("step-breakdown", "Where each device's step time goes", list(timed), segments)
        )
    lines = _per_device_lines(run, devices, TIME, STEP_MS, suffix=" step")
    lines += _per_device_lines(run, devices, TIME, DATA_WAIT_MS, dashed=True, suffix=" data wait")
    if lines:
        section.charts.append(LineChart("step-time", "Step time and data wait per batch", "ms", lines, y_min=0.0))
    if not section.charts:
        section.note = "No time/rank*/data_wait_pct, comm_pct or step_ms metrics in this run."
    return section


def _throughput_section(run: RunData, devices: Sequence[str]) -> Section:
    section = Section("throughput", "Throughput")
    lines = []
    total_key = f"{THROUGHPUT}/{SAMPLES_PER_SEC}"
    if run.series.get(total_key):
        lines.append(Line(total_key, "all devices", run.series[total_key], TOTAL_COLOR))
    lines += _per_device_lines(run, devices, THROUGHPUT, SAMPLES_PER_SEC)
    if lines:
        section.charts.append(LineChart("throughput", "Training throughput", "samples / s", lines, y_min=0.0))
    mfu_key = f"{THROUGHPUT}/{MFU}"
    if run.series.get(mfu_key):
        pts = [(x, 100.0 * y) for x, y in run.series[mfu_key]]
        section.charts.append(
            LineChart(
                "mfu",
                "Model FLOPs utilisation (mean over devices)",
                "%",
                [Line(mfu_key, "MFU", pts, TOTAL_COLOR)],
                y_min=0.0,
            )
        )
    if not section.charts:
        section.note = "No throughput/samples_per_sec metrics in this run."
    return section


def _is_metric(key: str) -> bool:
    return parse_metric_key(key) is None


def _training_section(run: RunData) -> Section:
    section = Section("training", "Training curves")
    keys = [k for k in run.series if _is_metric(k)]
    for chart_id, title, word, unit in (("loss", "Loss", "loss", "loss"), ("accuracy", "Accuracy", "acc", "accuracy")):
        picked = sorted(k for k in keys if word in k.rsplit("/", 1)[-1].lower())
        lines = [Line(k, k, run.series[k], PALETTE[i % len(PALETTE)]) for i, k in enumerate(picked)]
        if lines:
            section.charts.append(LineChart(chart_id, title, unit, lines))
    if not section.charts:
        section.note = "No *loss* or *acc* metrics in this run."
    return section


def _charted_keys(sections: Iterable[Section]) -> set[str]:
    return {line.key for s in sections for c in s.charts if isinstance(c, LineChart) for line in c.lines}


def build_sections(run: RunData) -> list[Section]:
    """The chart sections of the dashboard, in page order (the diagnosis table is added by the renderer)."""
    devices = _devices(run)
    timeline = _timeline_section(run)
    return [
        *([timeline] if timeline is not None else []),
        _add_memory_charts(_utilisation_section(run, devices), run, devices),
        _step_time_section(run, devices),
        _throughput_section(run, devices),
        _training_section(run),
    ]


def run_diagnoses(run: RunData) -> tuple[list[Diagnosis], str]:
    """The diagnosis table's rows and where they came from.

    ``diagnosis.json`` (written by the GPU monitor at the end of fit; in the run folder, or recorded
    in a Neptune run by the logger) wins; otherwise
    :func:`~lightning_mgpu.monitoring.diagnosis.diagnose` runs on the last logged per-device values.
    """
    recorded: list[tuple[Path | str, str]] = (
        [(run.diagnosis_path, f"{run.diagnosis_path.name}")] if run.diagnosis_path is not None else []
    )
    if run.diagnosis_text:
        recorded.append((run.diagnosis_text, "the run's recorded diagnosis.json"))
    for source, label in recorded:
        try:
            diagnoses, meta = load_diagnoses(source)
        except (OSError, ValueError, KeyError, TypeError) as err:
            run.notes.append(f"could not read {label} ({err}); diagnosing from the logged values instead")
            continue
        at = f" at step {meta['step']}" if "step" in meta else ""
        return diagnoses, f"from {label}, written by GPUUtilizationMonitor{at}"
    per_device = per_device_from_metrics(run.last_values())
    if not per_device:
        return [], "no per-device monitor metrics in this run: add GPUUtilizationMonitor() to the Trainer's callbacks"
    return diagnose(per_device), "computed with diagnose() from the last logged value of each per-device metric"


# ============================================================================ Plotly figures


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: float) -> str:
    """A short, readable number (``87.5``, ``0.0123``, ``12,345``)."""
    if value == 0 or not math.isfinite(value):
        return str(0 if value == 0 else value)
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _extent(chart: LineChart) -> tuple[float, float, float, float]:
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
    _x0, _x1, y0, y1 = _extent(chart)
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


# ============================================================================ HTML page


_CSS = """
:root{--fg:#1d2433;--muted:#5b6577;--line:#d9dee7;--bg:#f5f7fa;--card:#fff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--fg);background:var(--bg)}
header{background:#1d2433;color:#fff;padding:18px 28px}
header h1{margin:0 0 4px;font-size:20px;font-weight:600}
header .sub{color:#c4cad6;font-size:13px;word-break:break-all}
nav{padding:8px 28px;background:#fff;border-bottom:1px solid var(--line);position:sticky;top:0;z-index:2}
nav a{margin-right:16px;color:#2459a8;text-decoration:none;font-size:13px}
main{padding:18px 28px 40px;max-width:1700px}
section{margin:0 0 26px}
h2{font-size:17px;margin:0 0 10px;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-bottom:22px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:150px}
.card .k{color:var(--muted);font-size:12px}.card .v{font-size:20px;font-weight:600}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:16px}
figure.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;
  position:relative}
figure.chart figcaption{font-weight:600;margin:0 0 4px;display:flex;justify-content:space-between;gap:8px}
figure.chart figcaption a{font-weight:400;font-size:12px;color:#2459a8}
.plot{min-height:300px;width:100%}
.live{font-size:12px;background:#2ca02c;border-radius:10px;padding:2px 8px;vertical-align:middle;margin-left:8px}
.note{color:var(--muted);background:#fff;border:1px dashed var(--line);border-radius:8px;padding:10px 14px}
table{border-collapse:collapse;background:#fff;border:1px solid var(--line);border-radius:8px;font-size:13px;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef1f6;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td ul{margin:0;padding-left:18px}
.badge{display:inline-block;white-space:nowrap;padding:2px 8px;border-radius:10px;font-size:12px;font-weight:600;
  color:#fff}
.v-input-bound{background:#d62728}.v-communication-bound{background:#ff7f0e}.v-compute-bound{background:#1f77b4}
.v-healthy{background:#2ca02c}.v-low-utilisation-unexplained{background:#9467bd}
details{margin-top:8px}summary{cursor:pointer;color:#2459a8}
pre{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px;overflow:auto;font-size:12px}
.src{color:var(--muted);font-size:12px;margin:6px 0 0}
"""

# Draws every chart from the embedded JSON with the inlined plotly.js; in a live page, polls data.json and
# replaces data (Plotly.react keeps zoom and legend state) or, when the set of charts changed, the whole main.
_JS = """
(function(){
  var state=JSON.parse(document.getElementById('dashboard-data').textContent);
  var config={displaylogo:false,responsive:true,toImageButtonOptions:{format:'png',scale:2}};
  function draw(figs){
    var jobs=Object.keys(figs).map(function(id){var el=document.getElementById('plot-'+id);
      return el?Plotly.react(el,figs[id].data,figs[id].layout,config):null;});
    return Promise.all(jobs).then(function(){
      document.body.setAttribute('data-rendered',String(document.querySelectorAll('.js-plotly-plot').length));
      document.body.setAttribute('data-version',String(state.version));
      document.body.setAttribute('data-last-step',String(state.last_step));});
  }
  function update(next){
    var same=JSON.stringify(Object.keys(next.figures))===JSON.stringify(Object.keys(state.figures));
    if(same){document.querySelectorAll('[data-live-region]').forEach(function(el){
      var html=next.regions[el.getAttribute('data-live-region')];if(html!==undefined)el.innerHTML=html;});}
    else{document.querySelector('main').innerHTML=next.main;}
    state=next;return draw(next.figures);
  }
  draw(state.figures);
  var every=parseFloat(document.body.getAttribute('data-live')||'0')*1000;
  if(every>0){
    var poll=function(){
      fetch('data.json?since='+state.version,{cache:'no-store'}).then(function(r){return r.json();})
        .then(function(next){if(next.version!==state.version)return update(next);})
        .catch(function(err){document.body.setAttribute('data-live-error',String(err));})
        .then(function(){setTimeout(poll,every);});
    };
    setTimeout(poll,every);
  }
})();
"""


def _figure(chart: Chart, png: str | None) -> str:
    kind = "line" if isinstance(chart, LineChart) else "stacked-bar"
    link = f'<a href="{_esc(png)}">PNG</a>' if png else ""
    return (
        f'<figure class="chart" id="chart-{_esc(chart.id)}" data-chart="{_esc(chart.id)}"'
        f' data-kind="{kind}"><figcaption><span>{_esc(chart.title)}</span>{link}</figcaption><div class="plot"'
        f' id="plot-{_esc(chart.id)}"></div></figure>'
    )


def _diagnosis_html(diagnoses: Sequence[Diagnosis], source: str) -> str:
    if not diagnoses:
        return f'<p class="note">{_esc(source)}</p>'
    cols = (
        ("util %", ("gpu_util_pct", "cpu_util_pct"), 1.0),
        ("data wait %", ("data_wait_pct",), 1.0),
        ("comm %", ("comm_pct",), 1.0),
        ("step ms", ("step_ms",), 1.0),
        ("samples/s", ("samples_per_sec",), 1.0),
        ("MFU %", ("mfu",), 100.0),
    )
    head = "".join(f'<th class="num">{_esc(c)}</th>' for c, _, _ in cols)
    rows = []
    for d in diagnoses:
        cells = []
        for _, names, scale in cols:
            value = next((d.evidence[n] for n in names if n in d.evidence), None)
            cells.append(f'<td class="num">{_esc(fmt(value * scale)) if value is not None else "-"}</td>')
        advice = "".join(f"<li>{_esc(a)}</li>" for a in d.advice)
        evidence = _esc(json.dumps(d.evidence, sort_keys=True))
        rows.append(
            f'<tr data-device="{_esc(d.device)}" data-verdict="{_esc(d.verdict)}" data-evidence="{evidence}">'
            f'<td>{_esc(d.device)}</td><td><span class="badge v-{_esc(d.verdict)}">{_esc(d.verdict)}</span></td>'
            f"{''.join(cells)}<td><ul>{advice}</ul></td></tr>"
        )
    return (
        f'<table id="diagnosis-table"><thead><tr><th>device</th><th>verdict</th>{head}<th>advice</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table><p class="src">Diagnosis {_esc(source)}.</p>'
    )


def _table(rows: Iterable[Sequence[str]], header: Sequence[str], table_id: str, numeric_from: int = 1) -> str:
    head = "".join(f"<th{' class=num' if i >= numeric_from else ''}>{_esc(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if i >= numeric_from else ''}>{_esc(c)}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cards(run: RunData, diagnoses: Sequence[Diagnosis]) -> str:
    last = run.last_values()
    steps = [pts[-1][0] for pts in run.series.values() if pts]
    cards: list[tuple[str, str]] = [
        ("last step", fmt(max(steps)) if steps else "-"),
        ("devices", str(len(_devices(run)) or "-")),
    ]
    for key, label in (
        (f"{THROUGHPUT}/{SAMPLES_PER_SEC}", "samples/s (last)"),
        ("val_acc", "val_acc (last)"),
        ("val_loss", "val_loss (last)"),
    ):
        if key in last:
            cards.append((label, fmt(last[key])))
    if diagnoses:
        verdicts = sorted({d.verdict for d in diagnoses})
        cards.append(("verdict", ", ".join(verdicts)))
    if run.info.get("status"):
        cards.append(("status", run.info["status"]))
    body = "".join(
        f'<div class="card" data-card="{_esc(k)}"><div class="k">{_esc(k)}</div><div class="v">{_esc(v)}</div></div>'
        for k, v in cards
    )
    return f'<div class="cards">{body}</div>'


def _last_step(run: RunData) -> float:
    steps = [pts[-1][0] for pts in run.series.values() if pts]
    return max(steps) if steps else 0.0


def _diagnosis_position(sections: Sequence[Section]) -> int:
    """Where the diagnosis table goes: after the monitor's charts, before the training curves."""
    return next((i for i, s in enumerate(sections) if s.id == "training"), len(sections))


def page_state(
    run: RunData,
    sections: Sequence[Section],
    diagnoses: Sequence[Diagnosis],
    diagnosis_source: str,
    pngs: dict[str, str] | None = None,
    version: int = 0,
) -> dict[str, Any]:
    """Everything the page shows, as JSON: Plotly figures by chart id and the HTML of the other regions.

    The static page embeds it; ``--serve`` sends it as ``data.json`` whenever the run changed.
    """
    pngs = pngs or {}
    regions = {
        "cards": _cards(run, diagnoses),
        "diagnosis": _diagnosis_html(diagnoses, diagnosis_source),
        "details": _details_html(run, sections),
    }
    split = _diagnosis_position(sections)

    def section_html(s: Section) -> str:
        body = "".join(_figure(c, pngs.get(c.id)) for c in s.charts)
        note = f'<p class="note">{_esc(s.note)}</p>' if s.note else ""
        return f'<section id="{_esc(s.id)}"><h2>{_esc(s.title)}</h2>{note}<div class="grid">{body}</div></section>'

    main = [f'<div data-live-region="cards">{regions["cards"]}</div>']
    main += [section_html(s) for s in sections[:split]]
    main.append(
        '<section id="diagnosis"><h2>Diagnosis</h2><div'
        f' data-live-region="diagnosis">{regions["diagnosis"]}</div></section>'
    )
    main += [section_html(s) for s in sections[split:]]
    main.append(f'<div data-live-region="details">{regions["details"]}</div>')
    return {
        "version": version,
        "last_step": _last_step(run),
        "figures": {c.id: figure_json(c) for s in sections for c in s.charts},
        "regions": regions,
        "main": "".join(main),
    }


def _inline_json(data: Any) -> str:
    # Inside <script>, "</" would end the element early.
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def render_html(
    run: RunData,
    sections: Sequence[Section],
    diagnoses: Sequence[Diagnosis],
    diagnosis_source: str,
    pngs: dict[str, str] | None = None,
    live_interval: float | None = None,
    state: dict[str, Any] | None = None,
) -> str:
    """The dashboard page as one self-contained HTML string: plotly.js is inlined, nothing is fetched.

    Args:
        live_interval: seconds between polls of ``data.json`` (``--serve``); ``None`` for a static page.
        state: a :func:`page_state` already computed (the server keeps one).
    """
    plotly = require("plotly", "the dashboard")
    state = state or page_state(run, sections, diagnoses, diagnosis_source, pngs)
    name = run.info.get("name")
    title = name if name and name != "Untitled" else run.info.get("run") or run.path.name
    split = _diagnosis_position(sections)
    nav = (
        [(s.id, s.title) for s in sections[:split]]
        + [("diagnosis", "Diagnosis")]
        + [(s.id, s.title) for s in sections[split:]]
        + [("details", "Run details")]
    )
    live = f' data-live="{live_interval:g}"' if live_interval else ""
    badge = ' <span class="live">live</span>' if live_interval else ""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,'
            ' initial-scale=1">',
            f"<title>{_esc(title)} - lightning_mgpu dashboard</title><style>{_CSS}</style>",
            # plotly.js inline, as write_html(include_plotlyjs=True) does: the page works offline, from a file.
            f"<script>{plotly.offline.get_plotlyjs()}</script></head>",
            f'<body data-run-kind="{_esc(run.kind)}" data-run-path="{_esc(run.path)}"{live}>',
            f'<header><h1>{_esc(title)}{badge}</h1><div class="sub">{_esc(run.info.get("logger", run.kind))} &middot;'
            f" {_esc(run.path)}</div></header>",
            "<nav>" + "".join(f'<a href="#{i}">{_esc(t)}</a>' for i, t in nav) + "</nav>",
            f"<main>{state['main']}</main>",
            f'<script type="application/json" id="dashboard-data">{_inline_json(state)}</script>',
            f"<script>{_JS}</script></body></html>",
        ]
    )


def _details_html(run: RunData, sections: Sequence[Section]) -> str:
    out = ['<section id="details"><h2>Run details</h2>']
    out.append(_table(sorted(run.info.items()), ("field", "value"), "run-info", numeric_from=9))
    charted = _charted_keys(sections)
    others = sorted(k for k in run.series if k not in charted and k != "epoch" and _is_metric(k))
    if others:
        rows = []
        for k in others:
            ys = [y for _, y in run.series[k]]
            rows.append((k, str(len(ys)), fmt(ys[-1]), fmt(min(ys)), fmt(max(ys))))
        out.append(
            "<h2 style='margin-top:18px'>Other metrics</h2>"
            + _table(rows, ("metric", "points", "last", "min", "max"), "other-metrics")
        )
    if run.hparams:
        hparams = [(k, str(v)) for k, v in sorted(run.hparams.items())]
        out.append(
            "<details open><summary>Hyperparameters"
            f" ({len(hparams)})</summary>{_table(hparams, ('name', 'value'), 'hparams', numeric_from=9)}</details>"
        )
    if run.model_summary:
        out.append(f"<details><summary>Model summary</summary><pre>{_esc(run.model_summary)}</pre></details>")
    if run.notes:
        out.append(
            "<details open><summary>Notes</summary><ul>"
            + "".join(f"<li>{_esc(n)}</li>" for n in run.notes)
            + "</ul></details>"
        )
    out.append("</section>")
    return "".join(out)


# ============================================================================ PNG (matplotlib)


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
    x0, x1, y0, y1 = _extent(chart)
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


# ============================================================================ entry points


def default_out_dir(run: RunData) -> Path:
    """``RUN/dashboard`` for a CSV or TensorBoard run; ``<neptune data dir>/dashboards/<run folder>`` for a Neptune one.

    A Neptune offline run folder is deleted by ``neptune sync`` once uploaded, so the dashboard lives beside it.
    """
    if run.kind != NEPTUNE_KIND:
        return run.path / "dashboard"
    data_dir = run.path.parent.parent if run.path.parent.name == "offline" else run.path.parent
    return data_dir / "dashboards" / run.path.name


def render_dashboard(
    run_path: str | os.PathLike, out_dir: str | os.PathLike | None = None, png: bool = True
) -> DashboardResult:
    """Read the run at ``run_path`` and write ``index.html`` (and the charts as PNG) to ``out_dir``.

    Args:
        run_path: a CSV-logger, TensorBoard or Neptune offline run folder, or a folder holding several of one kind.
        out_dir: where to write; see :func:`default_out_dir`.
        png: also draw PNGs with matplotlib. Without matplotlib the page is still written and a
            warning names the extra to install.

    Raises:
        FileNotFoundError: ``run_path`` does not exist.
        RunFormatError: ``run_path`` is neither kind of run folder.

    Example::

        result = render_dashboard("outputs/logs/version_0")
        print(result.html)  # outputs/logs/version_0/dashboard/index.html
    """
    run = read_run(run_path)
    out = Path(out_dir) if out_dir is not None else default_out_dir(run)
    out.mkdir(parents=True, exist_ok=True)
    sections = build_sections(run)
    diagnoses, source = run_diagnoses(run)
    pngs: dict[str, Path] = {}
    if png:
        try:
            pngs = render_pngs(sections, out)
        except MissingDependencyError as err:
            log.warning("dashboard: PNG images skipped: %s", err)
            run.notes.append(f"PNG images skipped: {err}")
    page = render_html(run, sections, diagnoses, source, {k: p.name for k, p in pngs.items()})
    html_path = out / "index.html"
    atomic_write(html_path, lambda f: f.write(page.encode("utf-8")))
    return DashboardResult(html=html_path, pngs=list(pngs.values()), run=run, diagnoses=diagnoses)


def main(args: argparse.Namespace) -> int:
    """``python -m lightning_mgpu dashboard RUN [--out DIR] [--no-png]``; returns the exit code."""
    from lightning_mgpu.dashboard.reader import RunFormatError

    try:
        result = render_dashboard(args.run, args.out, png=not getattr(args, "no_png", False))
    except (FileNotFoundError, RunFormatError) as err:
        sys.stderr.write(f"lightning-mgpu dashboard: error: {err}\n")
        return 2
    for note in result.run.notes:
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(f"dashboard: {result.html}\n")
    if result.pngs:
        sys.stdout.write(f"charts (PNG): {', '.join(p.name for p in result.pngs)} in {result.html.parent}\n")
    return 0
