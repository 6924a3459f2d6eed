"""A local, self-contained HTML dashboard of a training run (plus PNG images of its charts).

The hosted Neptune dashboards are gone; this renders the same views from files on disk::

    python -m lightning_mgpu dashboard outputs/logs/version_0            # a CSVLogger folder
    python -m lightning_mgpu dashboard .neptune/offline/run__<id>__...    # a NeptuneLogger offline run
    python -m lightning_mgpu dashboard RUN --out report/ --no-png

Charts: per-device utilisation and memory over steps, the step-time breakdown (data wait /
compute / communication) per device, throughput (and MFU), the GPU monitor's diagnosis table
(``diagnosis.json`` if the run has one, else computed with
:func:`~lightning_mgpu.utilities.diagnosis.diagnose` from the last logged values), training
curves, and a table of any other metric.

The page needs no network: charts are inline SVG, CSS and the hover read-out script are inline.
Each plotted series carries its values in the DOM (``data-key``, ``data-last``, ``data-min``,
``data-max``, ``data-points``; ``<title>`` tooltips on the markers), so a test or a script can
read them back. The PNGs (``<chart id>.png``) are drawn by matplotlib, imported only here.

Default output folder: ``RUN/dashboard`` for a CSV run; for a Neptune offline run
``<neptune data dir>/dashboards/<run folder>``, outside the run folder that ``neptune sync``
deletes after uploading.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from lightning_mgpu.utilities.diagnosis import Diagnosis, diagnose, load_diagnoses, per_device_from_metrics
from lightning_mgpu.utilities.imports import MissingDependencyError, require
from lightning_mgpu.utilities.monitor_keys import (
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
from lightning_mgpu.utilities.run_reader import CSV_KIND, Point, RunData, read_run

log = logging.getLogger(__name__)

#: Colours by device index (matplotlib's tab10), so a device has one colour in every chart.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
TOTAL_COLOR = "#222222"
SEGMENT_COLORS = {"data wait": "#d62728", "communication": "#ff7f0e", "compute": "#2ca02c"}
MAX_DRAWN_POINTS = 800  # per series in the SVG; min/max per bucket keeps spikes visible
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


Chart = Union[LineChart, StackedBarChart]


@dataclass
class Section:
    id: str
    title: str
    charts: list[Chart] = field(default_factory=list)
    note: str | None = None


@dataclass
class DashboardResult:
    """What :func:`render_dashboard` wrote."""

    html: Path
    pngs: list[Path]
    run: RunData
    diagnoses: list[Diagnosis]


# ============================================================================ building the charts from a run


def _devices(run: RunData) -> list[str]:
    found = set()
    for key in run.series:
        parsed = parse_metric_key(key)
        if parsed is not None and parsed[1] is not None:
            found.add(parsed[1])
    return sorted(found, key=lambda d: parse_device_label(d) or (10**9, None))  # type: ignore[arg-type,return-value]


def _color(devices: Sequence[str], device: str) -> str:
    return PALETTE[devices.index(device) % len(PALETTE)]


def _per_device_lines(run: RunData, devices: Sequence[str], group: str, name: str, dashed: bool = False, suffix: str = "") -> list[Line]:
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
    for group, title in ((GPU, "GPU utilisation (NVML, % of time a kernel ran)"), (CPU, "CPU utilisation of the training process")):
        lines = [_with_band(run, line, group, line.label) for line in _per_device_lines(run, devices, group, UTIL_PCT)]
        if lines:
            top = max(100.0, *(y for line in lines for _, y in line.points))
            section.charts.append(LineChart(f"{group}-utilisation", title, "%", lines, y_min=0.0, y_max=top))
    if not section.charts:
        section.note = "No gpu/rank*/util_pct or cpu/rank*/util_pct metrics: add lightning_mgpu.callbacks.GPUUtilizationMonitor() to the Trainer's callbacks."
    return section


def _add_memory_charts(section: Section, run: RunData, devices: Sequence[str]) -> Section:
    """Memory over steps joins the utilisation section, so both sit side by side."""
    lines = _per_device_lines(run, devices, GPU, MEM_USED_GB)
    if lines:
        totals = [pts[-1][1] for d in devices if (pts := run.series.get(f"{GPU}/{d}/{MEM_TOTAL_GB}"))]
        if totals:
            xs = [x for line in lines for x, _ in line.points]
            cap = max(totals)
            lines.append(Line(f"{GPU}/*/{MEM_TOTAL_GB}", f"capacity ({cap:.1f} GB)", [(min(xs), cap), (max(xs), cap)], TOTAL_COLOR, dashed=True))
        section.charts.append(LineChart("gpu-memory", "GPU memory used (whole device)", "GB", lines, y_min=0.0))
    lines = _per_device_lines(run, devices, CPU, RSS_GB)
    if lines:
        section.charts.append(LineChart("cpu-memory", "Resident memory of the training process", "GB", lines, y_min=0.0))
    if section.charts:
        section.note = None
    return section


def _mean(points: Sequence[Point]) -> float:
    return sum(y for _, y in points) / len(points) if points else 0.0


def _step_time_section(run: RunData, devices: Sequence[str]) -> Section:
    section = Section("step-time", "Step-time breakdown")
    timed = [d for d in devices if run.series.get(f"{TIME}/{d}/{DATA_WAIT_PCT}") or run.series.get(f"{TIME}/{d}/{COMM_PCT}")]
    if timed:
        wait = [min(100.0, max(0.0, _mean(run.series.get(f"{TIME}/{d}/{DATA_WAIT_PCT}", [])))) for d in timed]
        comm = [min(100.0 - w, max(0.0, _mean(run.series.get(f"{TIME}/{d}/{COMM_PCT}", [])))) for d, w in zip(timed, wait)]
        compute = [max(0.0, 100.0 - w - c) for w, c in zip(wait, comm)]
        segments = [
            Segment("data wait", SEGMENT_COLORS["data wait"], wait),
            Segment("communication", SEGMENT_COLORS["communication"], comm),
            Segment("compute", SEGMENT_COLORS["compute"], compute),
        ]
        section.charts.append(StackedBarChart("step-breakdown", "Where each device's step time goes", list(timed), segments))
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
        section.charts.append(LineChart("mfu", "Model FLOPs utilisation (mean over devices)", "%", [Line(mfu_key, "MFU", pts, TOTAL_COLOR)], y_min=0.0))
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
    return [
        _add_memory_charts(_utilisation_section(run, devices), run, devices),
        _step_time_section(run, devices),
        _throughput_section(run, devices),
        _training_section(run),
    ]


def run_diagnoses(run: RunData) -> tuple[list[Diagnosis], str]:
    """The diagnosis table's rows and where they came from.

    ``diagnosis.json`` (written by the GPU monitor at the end of fit; in the run folder, or recorded
    in a Neptune run by the logger) wins; otherwise
    :func:`~lightning_mgpu.utilities.diagnosis.diagnose` runs on the last logged per-device values.
    """
    recorded = [(run.diagnosis_path, f"{run.diagnosis_path.name}")] if run.diagnosis_path is not None else []
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


# ============================================================================ SVG


_W, _H = 760, 300
_ML, _MR, _MT, _MB = 64, 20, 14, 42


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: float) -> str:
    """A short, readable number (``87.5``, ``0.0123``, ``12,345``)."""
    if value == 0 or not math.isfinite(value):
        return str(0 if value == 0 else value)
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _num(value: float) -> str:
    """A number for a data attribute: enough digits to compare with what was logged."""
    return f"{value:.6g}"


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About ``count`` round tick values (1, 2, 5 x 10^k steps) covering ``[lo, hi]``; whole numbers if ``integer``."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if integer:
        step = max(1.0, math.ceil(step))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def downsample(points: Sequence[Point], max_points: int = MAX_DRAWN_POINTS) -> list[Point]:
    """At most ``max_points`` points, keeping each bucket's min and max so spikes stay visible."""
    if len(points) <= max_points:
        return list(points)
    buckets = max_points // 2
    size = len(points) / buckets
    out: list[Point] = []
    for b in range(buckets):
        chunk = points[int(b * size) : int((b + 1) * size)] or [points[min(int(b * size), len(points) - 1)]]
        lo = min(chunk, key=lambda p: p[1])
        hi = max(chunk, key=lambda p: p[1])
        out.extend(sorted({lo, hi}, key=lambda p: p[0]))
    if out[-1] != points[-1]:
        out.append(points[-1])
    return out


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
        y1 = y1 + 0.05 * ((y1 - y0) or abs(y1) or 1.0)
    if y1 <= y0:
        y1 = y0 + 1.0
    return x0, x1, y0, y1


def _svg_axes(x0: float, x1: float, y0: float, y1: float, sx: Any, sy: Any, x_label: str, y_label: str) -> list[str]:
    out = ['<g class="axes">']
    for t in nice_ticks(y0, y1):
        if y0 <= t <= y1:
            y = sy(t)
            out.append(f'<line class="grid" x1="{_ML}" x2="{_W - _MR}" y1="{y:.1f}" y2="{y:.1f}"/>')
            out.append(f'<text class="tick" x="{_ML - 6}" y="{y + 4:.1f}" text-anchor="end">{_esc(fmt(t))}</text>')
    for t in nice_ticks(x0, x1, 6, integer=True):  # steps are whole numbers
        if x0 <= t <= x1:
            x = sx(t)
            out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_MT}" y2="{_H - _MB}"/>')
            out.append(f'<text class="tick" x="{x:.1f}" y="{_H - _MB + 16}" text-anchor="middle">{_esc(fmt(t))}</text>')
    out.append(f'<rect class="frame" x="{_ML}" y="{_MT}" width="{_W - _ML - _MR}" height="{_H - _MT - _MB}"/>')
    out.append(f'<text class="label" x="{(_ML + _W - _MR) / 2:.0f}" y="{_H - 6}" text-anchor="middle">{_esc(x_label)}</text>')
    out.append(f'<text class="label" transform="translate(14 {(_MT + _H - _MB) / 2:.0f}) rotate(-90)" text-anchor="middle">{_esc(y_label)}</text>')
    out.append("</g>")
    return out


def _svg_line(line: Line, sx: Any, sy: Any) -> str:
    drawn = downsample(line.points)
    ys = [y for _, y in line.points]
    last_x, last_y = line.points[-1]
    attrs = (
        f'class="series" data-key="{_esc(line.key)}" data-label="{_esc(line.label)}" data-color="{line.color}"'
        f' data-n="{len(line.points)}" data-last="{_num(last_y)}" data-last-step="{_num(last_x)}"'
        f' data-min="{_num(min(ys))}" data-max="{_num(max(ys))}" data-mean="{_num(sum(ys) / len(ys))}"'
        f' data-points="{";".join(f"{_num(x)},{_num(y)}" for x, y in drawn)}"'
    )
    out = [f"<g {attrs}>"]
    if line.band:
        band = downsample([(x, lo) for x, lo, _ in line.band]) + list(reversed(downsample([(x, hi) for x, _, hi in line.band])))
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in band)
        out.append(f'<polygon class="band" points="{pts}" fill="{line.color}"><title>{_esc(line.label)}: min-max within each logging window</title></polygon>')
    pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in drawn)
    dash = ' stroke-dasharray="6 4"' if line.dashed else ""
    out.append(f'<polyline points="{pts}" stroke="{line.color}"{dash}/>')
    stride = max(1, math.ceil(len(line.points) / MAX_MARKERS))
    marked = list(line.points[::stride])
    if marked[-1] != line.points[-1]:
        marked.append(line.points[-1])
    for x, y in marked:
        out.append(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.6" fill="{line.color}"><title>{_esc(line.label)} @ step {fmt(x)}: {fmt(y)}</title></circle>'
        )
    out.append("</g>")
    return "".join(out)


def svg_line_chart(chart: LineChart) -> str:
    """An inline SVG line chart whose series carry their values as data attributes."""
    x0, x1, y0, y1 = _extent(chart)

    def sx(x: float) -> float:
        return _ML + (x - x0) / (x1 - x0) * (_W - _ML - _MR)

    def sy(y: float) -> float:
        return _H - _MB - (min(max(y, y0), y1) - y0) / (y1 - y0) * (_H - _MT - _MB)

    geometry = f'data-x0="{_num(x0)}" data-x1="{_num(x1)}" data-y0="{_num(y0)}" data-y1="{_num(y1)}" data-plot="{_ML} {_MT} {_W - _MR} {_H - _MB}"'
    out = [f'<svg class="line-chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{_esc(chart.title)}" {geometry}>']
    out += _svg_axes(x0, x1, y0, y1, sx, sy, chart.x_label, chart.y_label)
    out += [_svg_line(line, sx, sy) for line in chart.lines]
    out.append(f'<line class="cursor" x1="0" x2="0" y1="{_MT}" y2="{_H - _MB}" visibility="hidden"/>')
    out.append("</svg>")
    return "".join(out)


def svg_stacked_bars(chart: StackedBarChart) -> str:
    """Inline SVG horizontal stacked bars (one per device) with each segment's value in the DOM."""
    row, gap = 30, 12
    height = _MT + len(chart.categories) * (row + gap) + _MB
    left, right = 110, _W - _MR

    def sx(v: float) -> float:
        return left + v / chart.total * (right - left)

    out = [f'<svg class="bar-chart" viewBox="0 0 {_W} {height}" role="img" aria-label="{_esc(chart.title)}">']
    for t in nice_ticks(0, chart.total, 5):
        x = sx(t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{_MT}" y2="{height - _MB}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{height - _MB + 16}" text-anchor="middle">{_esc(fmt(t))}</text>')
    out.append(f'<text class="label" x="{(left + right) / 2:.0f}" y="{height - 6}" text-anchor="middle">{_esc(chart.x_label)}</text>')
    for i, category in enumerate(chart.categories):
        y = _MT + i * (row + gap) + gap / 2
        out.append(f'<g class="bar" data-device="{_esc(category)}">')
        out.append(f'<text class="tick" x="{left - 8}" y="{y + row / 2 + 4:.1f}" text-anchor="end">{_esc(category)}</text>')
        start = 0.0
        for seg in chart.segments:
            value = seg.values[i]
            x, w = sx(start), sx(start + value) - sx(start)
            out.append(
                f'<rect class="segment" data-segment="{_esc(seg.label)}" data-value="{_num(value)}" x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{row}" fill="{seg.color}">'
                f"<title>{_esc(category)} {_esc(seg.label)}: {fmt(value)}%</title></rect>"
            )
            if w > 42:
                out.append(f'<text class="seg-label" x="{x + w / 2:.1f}" y="{y + row / 2 + 4:.1f}" text-anchor="middle">{_esc(fmt(value))}%</text>')
            start += value
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


# ============================================================================ HTML page


_CSS = """
:root{--fg:#1d2433;--muted:#5b6577;--line:#d9dee7;--bg:#f5f7fa;--card:#fff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
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
figure.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 12px;position:relative}
figure.chart figcaption{font-weight:600;margin:0 0 4px;display:flex;justify-content:space-between;gap:8px}
figure.chart figcaption a{font-weight:400;font-size:12px;color:#2459a8}
svg{width:100%;height:auto;display:block}
svg .grid{stroke:#eceff4;stroke-width:1}
svg .frame{fill:none;stroke:#b8c0cc;stroke-width:1}
svg .tick{font-size:11px;fill:#5b6577}
svg .label{font-size:12px;fill:#3b4456}
svg .seg-label{font-size:11px;fill:#fff;font-weight:600}
svg polyline{fill:none;stroke-width:1.8;stroke-linejoin:round}
svg .band{fill-opacity:.14;stroke:none}
svg circle{fill-opacity:.85}
svg .cursor{stroke:#8893a5;stroke-width:1;stroke-dasharray:3 3}
ul.legend{list-style:none;margin:6px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#3b4456}
ul.legend li span.sw{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:5px}
ul.legend li span.sw.dashed{background:none!important;border-top:3px dashed}
.readout{position:absolute;pointer-events:none;background:rgba(29,36,51,.92);color:#fff;font-size:12px;padding:6px 8px;border-radius:6px;white-space:nowrap;display:none;z-index:3}
.note{color:var(--muted);background:#fff;border:1px dashed var(--line);border-radius:8px;padding:10px 14px}
table{border-collapse:collapse;background:#fff;border:1px solid var(--line);border-radius:8px;font-size:13px;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef1f6;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
td ul{margin:0;padding-left:18px}
.badge{display:inline-block;white-space:nowrap;padding:2px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.v-input-bound{background:#d62728}.v-communication-bound{background:#ff7f0e}.v-compute-bound{background:#1f77b4}
.v-healthy{background:#2ca02c}.v-low-utilisation-unexplained{background:#9467bd}
details{margin-top:8px}summary{cursor:pointer;color:#2459a8}
pre{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px;overflow:auto;font-size:12px}
.src{color:var(--muted);font-size:12px;margin:6px 0 0}
"""

# Hover read-out: for the step under the pointer, each series' nearest logged point (from data-points).
_JS = """
(function(){
  function parse(g){return (g.getAttribute('data-points')||'').split(';').filter(Boolean).map(function(p){var a=p.split(',');return [parseFloat(a[0]),parseFloat(a[1])];});}
  function nearest(pts,x){var lo=0,hi=pts.length-1;if(hi<0)return null;while(lo<hi){var m=(lo+hi)>>1;if(pts[m][0]<x)lo=m+1;else hi=m;}
    if(lo>0&&Math.abs(pts[lo-1][0]-x)<=Math.abs(pts[lo][0]-x))lo--;return pts[lo];}
  function fmt(v){var a=Math.abs(v);if(a>=10000)return Math.round(v).toLocaleString();return Number(v.toPrecision(4)).toString();}
  document.querySelectorAll('figure.chart').forEach(function(fig){
    var svg=fig.querySelector('svg.line-chart');if(!svg)return;
    var box=svg.getAttribute('data-plot').split(' ').map(Number),x0=+svg.getAttribute('data-x0'),x1=+svg.getAttribute('data-x1');
    var series=[].slice.call(svg.querySelectorAll('g.series')).map(function(g){return {g:g,pts:parse(g)};});
    var cursor=svg.querySelector('.cursor'),tip=fig.querySelector('.readout');
    svg.addEventListener('mousemove',function(ev){
      var r=svg.getBoundingClientRect(),vb=svg.viewBox.baseVal,px=(ev.clientX-r.left)*vb.width/r.width;
      if(px<box[0]||px>box[2]){cursor.setAttribute('visibility','hidden');tip.style.display='none';return;}
      var x=x0+(px-box[0])/(box[2]-box[0])*(x1-x0),rows=[],step=null;
      series.forEach(function(s){var p=nearest(s.pts,x);if(!p)return;step=step===null?p[0]:step;
        rows.push('<span style="color:'+s.g.getAttribute('data-color')+'">&#9632;</span> '+s.g.getAttribute('data-label')+': <b>'+fmt(p[1])+'</b>');});
      cursor.setAttribute('x1',px);cursor.setAttribute('x2',px);cursor.setAttribute('visibility','visible');
      tip.innerHTML='step '+fmt(step)+'<br>'+rows.join('<br>');tip.style.display='block';
      var fr=fig.getBoundingClientRect();tip.style.left=Math.min(ev.clientX-fr.left+14,fr.width-tip.offsetWidth-4)+'px';tip.style.top=(ev.clientY-fr.top+10)+'px';
    });
    svg.addEventListener('mouseleave',function(){cursor.setAttribute('visibility','hidden');tip.style.display='none';});
  });
  document.body.setAttribute('data-script','ready');
})();
"""


def _legend(chart: Chart) -> str:
    if isinstance(chart, LineChart):
        items = [(line.label, line.color, line.dashed) for line in chart.lines]
    else:
        items = [(seg.label, seg.color, False) for seg in chart.segments]
    lis = "".join(
        f'<li><span class="sw{" dashed" if dashed else ""}" style="background:{c};border-color:{c}"></span>{_esc(label)}</li>' for label, c, dashed in items
    )
    return f'<ul class="legend">{lis}</ul>'


def _figure(chart: Chart, png: str | None) -> str:
    svg = svg_line_chart(chart) if isinstance(chart, LineChart) else svg_stacked_bars(chart)
    kind = "line" if isinstance(chart, LineChart) else "stacked-bar"
    link = f'<a href="{_esc(png)}">PNG</a>' if png else ""
    return (
        f'<figure class="chart" id="chart-{_esc(chart.id)}" data-chart="{_esc(chart.id)}" data-kind="{kind}">'
        f"<figcaption><span>{_esc(chart.title)}</span>{link}</figcaption>{svg}{_legend(chart)}"
        '<div class="readout"></div></figure>'
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
    head = "".join(f'<th{" class=num" if i >= numeric_from else ""}>{_esc(h)}</th>' for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td{" class=num" if i >= numeric_from else ""}>{_esc(c)}</td>' for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cards(run: RunData, diagnoses: Sequence[Diagnosis]) -> str:
    last = run.last_values()
    steps = [pts[-1][0] for pts in run.series.values() if pts]
    cards: list[tuple[str, str]] = [("last step", fmt(max(steps)) if steps else "-"), ("devices", str(len(_devices(run)) or "-"))]
    for key, label in ((f"{THROUGHPUT}/{SAMPLES_PER_SEC}", "samples/s (last)"), ("val_acc", "val_acc (last)"), ("val_loss", "val_loss (last)")):
        if key in last:
            cards.append((label, fmt(last[key])))
    if diagnoses:
        verdicts = sorted({d.verdict for d in diagnoses})
        cards.append(("verdict", ", ".join(verdicts)))
    if run.info.get("status"):
        cards.append(("status", run.info["status"]))
    body = "".join(f'<div class="card" data-card="{_esc(k)}"><div class="k">{_esc(k)}</div><div class="v">{_esc(v)}</div></div>' for k, v in cards)
    return f'<div class="cards">{body}</div>'


def render_html(run: RunData, sections: Sequence[Section], diagnoses: Sequence[Diagnosis], diagnosis_source: str, pngs: dict[str, str] | None = None) -> str:
    """The dashboard page as one self-contained HTML string (no external resources)."""
    pngs = pngs or {}
    name = run.info.get("name")
    title = name if name and name != "Untitled" else run.info.get("run") or run.path.name
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)} - lightning_mgpu dashboard</title><style>{_CSS}</style></head>",
        f'<body data-run-kind="{_esc(run.kind)}" data-run-path="{_esc(run.path)}">',
        f'<header><h1>{_esc(title)}</h1><div class="sub">{_esc(run.info.get("logger", run.kind))} &middot; {_esc(run.path)}</div></header>',
    ]
    # The diagnosis table follows the monitor's charts and precedes the training curves.
    split = next((i for i, s in enumerate(sections) if s.id == "training"), len(sections))
    nav = [(s.id, s.title) for s in sections[:split]] + [("diagnosis", "Diagnosis")] + [(s.id, s.title) for s in sections[split:]] + [("details", "Run details")]
    parts.append("<nav>" + "".join(f'<a href="#{i}">{_esc(t)}</a>' for i, t in nav) + "</nav><main>")
    parts.append(_cards(run, diagnoses))

    def section_html(s: Section) -> str:
        body = "".join(_figure(c, pngs.get(c.id)) for c in s.charts)
        note = f'<p class="note">{_esc(s.note)}</p>' if s.note else ""
        return f'<section id="{_esc(s.id)}"><h2>{_esc(s.title)}</h2>{note}<div class="grid">{body}</div></section>'

    parts += [section_html(s) for s in sections[:split]]
    parts.append(f'<section id="diagnosis"><h2>Diagnosis</h2>{_diagnosis_html(diagnoses, diagnosis_source)}</section>')
    parts += [section_html(s) for s in sections[split:]]
    parts.append(_details_html(run, sections))
    parts.append(f"</main><script>{_JS}</script></body></html>")
    return "\n".join(parts)


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
        out.append("<h2 style='margin-top:18px'>Other metrics</h2>" + _table(rows, ("metric", "points", "last", "min", "max"), "other-metrics"))
    if run.hparams:
        rows = [(k, str(v)) for k, v in sorted(run.hparams.items())]
        out.append(f"<details open><summary>Hyperparameters ({len(rows)})</summary>{_table(rows, ('name', 'value'), 'hparams', numeric_from=9)}</details>")
    if run.model_summary:
        out.append(f"<details><summary>Model summary</summary><pre>{_esc(run.model_summary)}</pre></details>")
    if run.notes:
        out.append("<details open><summary>Notes</summary><ul>" + "".join(f"<li>{_esc(n)}</li>" for n in run.notes) + "</ul></details>")
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
        _atomic_write(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png"))
        written[chart.id] = path
    return written


def _mpl_lines(ax: Any, chart: LineChart) -> None:
    for line in chart.lines:
        xs, ys = zip(*line.points)
        if line.band:
            bx, lo, hi = zip(*line.band)
            ax.fill_between(bx, lo, hi, color=line.color, alpha=0.14, linewidth=0)
        ax.plot(xs, ys, color=line.color, linestyle="--" if line.dashed else "-", linewidth=1.6, label=line.label, marker="o" if len(xs) <= MAX_MARKERS else None, markersize=3)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel(chart.y_label)
    x0, x1, y0, y1 = _extent(chart)
    if len({x for line in chart.lines for x, _ in line.points}) == 1:
        ax.set_xlim(x0, x1)  # one logged step: show it mid-axis, as the SVG does
    ax.set_ylim(y0, y1)


def _mpl_bars(ax: Any, chart: StackedBarChart) -> None:
    left = [0.0] * len(chart.categories)
    ys = list(range(len(chart.categories)))
    for seg in chart.segments:
        bars = ax.barh(ys, seg.values, left=left, color=seg.color, label=seg.label, height=0.6)
        for bar, value in zip(bars, seg.values):
            if value >= 6:
                ax.text(bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2, f"{fmt(value)}%", ha="center", va="center", color="white", fontsize=8)
        left = [a + b for a, b in zip(left, seg.values)]
    ax.set_yticks(ys, chart.categories)
    ax.invert_yaxis()
    ax.set_xlim(0, chart.total)
    ax.set_xlabel(chart.x_label)


# ============================================================================ entry points


def _atomic_write(path: Path, write: Any) -> None:
    """Write via a temporary file and rename, so an interrupted render never leaves half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def default_out_dir(run: RunData) -> Path:
    """``RUN/dashboard`` for a CSV run; ``<neptune data dir>/dashboards/<run folder>`` for a Neptune one.

    A Neptune offline run folder is deleted by ``neptune sync`` once uploaded, so the dashboard lives beside it.
    """
    if run.kind == CSV_KIND:
        return run.path / "dashboard"
    data_dir = run.path.parent.parent if run.path.parent.name == "offline" else run.path.parent
    return data_dir / "dashboards" / run.path.name


def render_dashboard(run_path: str | os.PathLike, out_dir: str | os.PathLike | None = None, png: bool = True) -> DashboardResult:
    """Read the run at ``run_path`` and write ``index.html`` (and the charts as PNG) to ``out_dir``.

    Args:
        run_path: a CSV-logger folder, a Neptune offline run folder, or a folder holding several of one kind.
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
    _atomic_write(html_path, lambda tmp: tmp.write_text(page, encoding="utf-8"))
    return DashboardResult(html=html_path, pngs=list(pngs.values()), run=run, diagnoses=diagnoses)


def main(args: argparse.Namespace) -> int:
    """``python -m lightning_mgpu dashboard RUN [--out DIR] [--no-png]``; returns the exit code."""
    from lightning_mgpu.utilities.run_reader import RunFormatError

    try:
        result = render_dashboard(args.run, args.out, png=not getattr(args, "no_png", False))
    except (FileNotFoundError, RunFormatError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    for note in result.run.notes:
        sys.stdout.write(f"note: {note}\n")
    sys.stdout.write(f"dashboard: {result.html}\n")
    if result.pngs:
        sys.stdout.write(f"charts (PNG): {', '.join(p.name for p in result.pngs)} in {result.html.parent}\n")
    return 0
