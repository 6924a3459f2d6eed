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
import dataclasses
import html
import json
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_mgpu.dashboard.charts import (
    PALETTE,
    PHASE_COLORS,
    SEGMENT_COLORS,
    TIME_AXIS,
    TOTAL_COLOR,
    Line,
    LineChart,
    Section,
    Segment,
    StackedBarChart,
    fmt,
)
from lightning_mgpu.dashboard.export import (
    CSV_NAME,
    PARQUET_NAME,
    timeline_table,
    write_timeline_csv,
    write_timeline_parquet,
)
from lightning_mgpu.dashboard.figures import figure_json
from lightning_mgpu.dashboard.page import CSS, JS, chart_html, escape, inline_json, table_html
from lightning_mgpu.dashboard.png import render_pngs
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
from lightning_mgpu.utilities.deprecation import moved_names
from lightning_mgpu.utilities.files import atomic_write
from lightning_mgpu.utilities.imports import MissingDependencyError, require

log = logging.getLogger(__name__)


@dataclass
class DashboardResult:
    """What :func:`render_dashboard` wrote. As the last expression of a notebook cell it shows the page inline."""

    html: Path
    pngs: list[Path]
    run: RunData
    diagnoses: list[Diagnosis]
    #: The time line as a table (``timeline.csv``, ``timeline.parquet``), where the run has one.
    exports: list[Path] = dataclasses.field(default_factory=list)

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


def _summed(series: Sequence[Sequence[Point]]) -> list[Point]:
    """The sum of step series that report at different steps: each holds its last value until its next point."""
    last: dict[int, float] = {}
    out: list[Point] = []
    for x, i, y in sorted((x, i, y) for i, points in enumerate(series) for x, y in points):
        last[i] = y
        if len(last) == len(series):
            if out and out[-1][0] == x:
                out.pop()
            out.append((x, sum(last.values())))
    return out


def _throughput_section(run: RunData, devices: Sequence[str]) -> Section:
    section = Section("throughput", "Throughput")
    total_key = f"{THROUGHPUT}/{SAMPLES_PER_SEC}"
    per_device = _per_device_lines(run, devices, THROUGHPUT, SAMPLES_PER_SEC)
    total = run.series.get(total_key, [])
    if len(per_device) > 1 and min(len(line.points) for line in per_device) > len(total):
        # The devices at the time line's resolution: their sum at each step any of them reported, once all have.
        total = _summed([line.points for line in per_device])
    lines = [Line(total_key, "all devices", total, TOTAL_COLOR)] if total else []
    lines += per_device
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


def timeline_by_step(run: RunData) -> dict[str, list[Point]]:
    """The time lines on the step axis: each key's samples averaged per optimizer step (every point carries the step
    it was taken at), as ``key -> [(step, value)]``."""
    sums: dict[str, dict[int, list[float]]] = {}
    for rank in sorted(run.timelines):
        for point in run.timelines[rank]:
            step = point.get("step")
            if step is None:
                continue
            for key, value in point.get("values", {}).items():
                total = sums.setdefault(key, {}).setdefault(int(step), [0.0, 0.0])
                total[0] += float(value)
                total[1] += 1
    return {key: [(float(step), t / n) for step, (t, n) in sorted(by.items())] for key, by in sums.items()}


def _at_step_resolution(run: RunData) -> RunData:
    """``run`` with each per-device series that its time line holds at finer grain taken from the time line.

    The window means come once per ``log_every_n_steps`` (2 or 3 points on a short run); the time line has a
    sample every poll interval, and the batches' timing as often. The min/max bands stay the windows'.
    """
    finer = {
        key: points
        for key, points in timeline_by_step(run).items()
        if parse_metric_key(key) is not None and len(points) > len(run.series.get(key, ()))
    }
    return dataclasses.replace(run, series={**run.series, **finer}) if finer else run


def build_sections(run: RunData) -> list[Section]:
    """The chart sections of the dashboard, in page order (the diagnosis table is added by the renderer)."""
    timeline = _timeline_section(run)
    run = _at_step_resolution(run)
    devices = _devices(run)
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


# ============================================================================ the page


def _diagnosis_html(diagnoses: Sequence[Diagnosis], source: str) -> str:
    if not diagnoses:
        return f'<p class="note">{escape(source)}</p>'
    cols = (
        ("util %", ("gpu_util_pct", "cpu_util_pct"), 1.0),
        ("data wait %", ("data_wait_pct",), 1.0),
        ("comm %", ("comm_pct",), 1.0),
        ("step ms", ("step_ms",), 1.0),
        ("samples/s", ("samples_per_sec",), 1.0),
        ("MFU %", ("mfu",), 100.0),
    )
    head = "".join(f'<th class="num">{escape(c)}</th>' for c, _, _ in cols)
    rows = []
    for d in diagnoses:
        cells = []
        for _, names, scale in cols:
            value = next((d.evidence[n] for n in names if n in d.evidence), None)
            cells.append(f'<td class="num">{escape(fmt(value * scale)) if value is not None else "-"}</td>')
        advice = "".join(f"<li>{escape(a)}</li>" for a in d.advice)
        evidence = escape(json.dumps(d.evidence, sort_keys=True))
        rows.append(
            f'<tr data-device="{escape(d.device)}" data-verdict="{escape(d.verdict)}" data-evidence="{evidence}">'
            f'<td>{escape(d.device)}</td><td><span class="badge v-{escape(d.verdict)}">{escape(d.verdict)}</span></td>'
            f"{''.join(cells)}<td><ul>{advice}</ul></td></tr>"
        )
    return (
        f'<table id="diagnosis-table"><thead><tr><th>device</th><th>verdict</th>{head}<th>advice</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table><p class="src">Diagnosis {escape(source)}.</p>'
    )


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
        f'<div class="card" data-card="{escape(k)}"><div class="k">{escape(k)}</div>'
        f'<div class="v">{escape(v)}</div></div>'
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
        body = "".join(chart_html(c, pngs.get(c.id)) for c in s.charts)
        note = f'<p class="note">{escape(s.note)}</p>' if s.note else ""
        links = "".join(f' <a class="export" href="{escape(href)}">{escape(label)}</a>' for label, href in s.links)
        return (
            f'<section id="{escape(s.id)}"><h2>{escape(s.title)}{links}</h2>{note}<div class="grid">{body}</div>'
            "</section>"
        )

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
            f"<title>{escape(title)} - lightning_mgpu dashboard</title><style>{CSS}</style>",
            # plotly.js inline, as write_html(include_plotlyjs=True) does: the page works offline, from a file.
            f"<script>{plotly.offline.get_plotlyjs()}</script></head>",
            f'<body data-run-kind="{escape(run.kind)}" data-run-path="{escape(run.path)}"{live}>',
            f'<header><h1>{escape(title)}{badge}</h1><div class="sub">'
            f"{escape(run.info.get('logger', run.kind))} &middot; {escape(run.path)}</div></header>",
            "<nav>" + "".join(f'<a href="#{i}">{escape(t)}</a>' for i, t in nav) + "</nav>",
            f"<main>{state['main']}</main>",
            f'<script type="application/json" id="dashboard-data">{inline_json(state)}</script>',
            f"<script>{JS}</script></body></html>",
        ]
    )


def _details_html(run: RunData, sections: Sequence[Section]) -> str:
    out = ['<section id="details"><h2>Run details</h2>']
    out.append(table_html(sorted(run.info.items()), ("field", "value"), "run-info", numeric_from=9))
    charted = _charted_keys(sections)
    others = sorted(k for k in run.series if k not in charted and k != "epoch" and _is_metric(k))
    if others:
        rows = []
        for k in others:
            ys = [y for _, y in run.series[k]]
            rows.append((k, str(len(ys)), fmt(ys[-1]), fmt(min(ys)), fmt(max(ys))))
        out.append(
            "<h2 style='margin-top:18px'>Other metrics</h2>"
            + table_html(rows, ("metric", "points", "last", "min", "max"), "other-metrics")
        )
    if run.hparams:
        hparams = [(k, str(v)) for k, v in sorted(run.hparams.items())]
        out.append(
            "<details open><summary>Hyperparameters"
            f" ({len(hparams)})</summary>{table_html(hparams, ('name', 'value'), 'hparams', numeric_from=9)}</details>"
        )
    if run.model_summary:
        out.append(f"<details><summary>Model summary</summary><pre>{escape(run.model_summary)}</pre></details>")
    if run.notes:
        out.append(
            "<details open><summary>Notes</summary><ul>"
            + "".join(f"<li>{escape(n)}</li>" for n in run.notes)
            + "</ul></details>"
        )
    out.append("</section>")
    return "".join(out)


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
    exports = _export_timeline(run, out, sections)
    page = render_html(run, sections, diagnoses, source, {k: p.name for k, p in pngs.items()})
    html_path = out / "index.html"
    atomic_write(html_path, lambda f: f.write(page.encode("utf-8")))
    return DashboardResult(html=html_path, pngs=list(pngs.values()), run=run, diagnoses=diagnoses, exports=exports)


def _export_timeline(run: RunData, out: Path, sections: Sequence[Section]) -> list[Path]:
    """The time line as CSV and Parquet beside the page, linked from its section; Parquet only with pyarrow."""
    section = next((s for s in sections if s.id == "timeline"), None)
    if section is None:
        return []
    table = timeline_table(run)  # built once for both files
    written = [write_timeline_csv(run, out / CSV_NAME, table)]
    try:
        written.append(write_timeline_parquet(run, out / PARQUET_NAME, table))
    except MissingDependencyError as err:
        log.warning("dashboard: the time line's Parquet file skipped: %s", err)
        run.notes.append(f"timeline.parquet skipped: {err}")
    section.links = [("CSV" if p.suffix == ".csv" else "Parquet", p.name) for p in written]
    return written


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
    if result.exports:
        sys.stdout.write(f"time line: {', '.join(p.name for p in result.exports)} in {result.html.parent}\n")
    return 0


#: The chart model, its Plotly figures and its PNG images have homes of their own (charts, figures, png).
__getattr__ = moved_names(__name__)
