"""Several runs on one page: ``lightning-mgpu dashboard RUN_A RUN_B ...``.

What Neptune's run comparison showed: the same job under ``dp``, ``ddp`` and ``horovod`` side by side. The page holds a
table of each run's figures (its diagnosis, samples/s, utilisation, data-wait share, peak memory, last validation
metric), throughput overlaid per step, and utilisation overlaid over wall time (each run from its own first sample;
the window means per step for a run without a time line). Each run is named by its folder (below the runs' common
parent) and its strategy. Self-contained like the single-run page (:mod:`lightning_mgpu.dashboard.render`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lightning_mgpu.dashboard.charts import PALETTE, TIME_AXIS, Line, LineChart, fmt
from lightning_mgpu.dashboard.figures import figure_json
from lightning_mgpu.dashboard.page import CSS, JS, chart_html, escape, inline_json, table_html
from lightning_mgpu.dashboard.reader import RunData, read_run
from lightning_mgpu.dashboard.render import run_diagnoses, timeline_series
from lightning_mgpu.monitoring.keys import (
    CPU,
    DATA_WAIT_PCT,
    GPU,
    MEM_USED_GB,
    RSS_GB,
    SAMPLES_PER_SEC,
    THROUGHPUT,
    TIME,
    UTIL_PCT,
    parse_metric_key,
)
from lightning_mgpu.utilities.files import atomic_write
from lightning_mgpu.utilities.imports import require


@dataclass
class RunSummary:
    """One run's line in the comparison table."""

    name: str
    strategy: str
    verdicts: str
    samples_per_sec: float | None
    util_pct: float | None
    data_wait_pct: float | None
    peak_memory_gb: float | None
    last_val: tuple[str, float] | None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _per_device_values(run: RunData, group: str, name: str) -> list[float]:
    return [
        y
        for key, pts in run.series.items()
        if (parsed := parse_metric_key(key)) is not None and parsed[0] == group and parsed[1] and parsed[2] == name
        for _, y in pts
    ]


def _group(run: RunData) -> str:
    """GPU when the run logged GPU utilisation, else the training processes' CPU."""
    return GPU if _per_device_values(run, GPU, UTIL_PCT) else CPU


def run_name(run: RunData, common: Path) -> str:
    """The run's folder below the runs' common parent (its own name when that is all there is)."""
    try:
        rel = run.path.resolve().relative_to(common)
    except ValueError:
        rel = Path(run.path.name)
    return str(rel) if str(rel) not in ("", ".") else run.path.name


def summarise(run: RunData, name: str) -> RunSummary:
    """The table's figures for one run, from its logged window means and its diagnosis."""
    diagnoses, _ = run_diagnoses(run)
    group = _group(run)
    memory = _per_device_values(run, GPU, MEM_USED_GB) or _per_device_values(run, CPU, RSS_GB)
    vals = sorted(k for k in run.series if k.startswith("val") and run.series[k])
    last = run.series[vals[0]][-1][1] if vals else None
    return RunSummary(
        name=name,
        strategy=str(run.context.get("strategy") or run.hparams.get("strategy") or "-"),
        verdicts=", ".join(sorted({d.verdict for d in diagnoses})) or "-",
        samples_per_sec=_mean([y for _, y in run.series.get(f"{THROUGHPUT}/{SAMPLES_PER_SEC}", [])]),
        util_pct=_mean(_per_device_values(run, group, UTIL_PCT)),
        data_wait_pct=_mean(_per_device_values(run, TIME, DATA_WAIT_PCT)),
        peak_memory_gb=max(memory) if memory else None,
        last_val=(vals[0], last) if vals and last is not None else None,
    )


def _utilisation_line(run: RunData, label: str, color: str) -> tuple[Line, bool] | None:
    """The run's utilisation, mean over its devices: over wall time from its time line, else per step."""
    series, _ = timeline_series(run)
    for group in (GPU, CPU):  # the time line's GPUs when it sampled any, else its processes' CPU
        keys = [k for k in series if k.startswith(f"{group}/") and k.endswith(f"/{UTIL_PCT}")]
        if keys:
            break
    if keys:
        by_time: dict[float, list[float]] = {}
        for key in keys:
            for t, y in series[key]:
                by_time.setdefault(round(t, 2), []).append(y)
        points = [(t, sum(ys) / len(ys)) for t, ys in sorted(by_time.items())]
        return Line(f"{label}/{group}/util_pct", label, points, color), True
    group = _group(run)
    by_step: dict[float, list[float]] = {}
    for key, pts in run.series.items():
        parsed = parse_metric_key(key)
        if parsed is not None and parsed[0] == group and parsed[1] and parsed[2] == UTIL_PCT:
            for x, y in pts:
                by_step.setdefault(x, []).append(y)
    if not by_step:
        return None
    return Line(
        f"{label}/{group}/util_pct", label, [(x, sum(v) / len(v)) for x, v in sorted(by_step.items())], color
    ), False


def comparison_charts(runs: Sequence[RunData], names: Sequence[str]) -> list[LineChart]:
    """Throughput per step and utilisation (over time where every run has a time line), one line per run."""
    charts = []
    throughput = [
        Line(f"{name}/{THROUGHPUT}/{SAMPLES_PER_SEC}", name, run.series[key], PALETTE[i % len(PALETTE)])
        for i, (run, name) in enumerate(zip(runs, names))
        if (key := f"{THROUGHPUT}/{SAMPLES_PER_SEC}") in run.series and run.series[key]
    ]
    if throughput:
        charts.append(
            LineChart("compare-throughput", "Training throughput (all devices)", "samples / s", throughput, y_min=0.0)
        )
    found = [
        line
        for i, (run, name) in enumerate(zip(runs, names))
        if (line := _utilisation_line(run, name, PALETTE[i % len(PALETTE)])) is not None
    ]
    if found:
        timed = all(over_time for _, over_time in found)
        lines = [line for line, over_time in found if over_time == timed]
        top = max(100.0, *(y for line in lines for _, y in line.points))
        title = "Utilisation, mean over each run's devices" + (" (every sample)" if timed else " (window means)")
        charts.append(
            LineChart(
                "compare-utilisation", title, "%", lines, y_min=0.0, y_max=top, x_label=TIME_AXIS if timed else "step"
            )
        )
    return charts


def _summary_table(summaries: Sequence[RunSummary]) -> str:
    rows = [
        (
            s.name,
            s.strategy,
            s.verdicts,
            fmt(s.samples_per_sec) if s.samples_per_sec is not None else "-",
            fmt(s.util_pct) if s.util_pct is not None else "-",
            fmt(s.data_wait_pct) if s.data_wait_pct is not None else "-",
            fmt(s.peak_memory_gb) if s.peak_memory_gb is not None else "-",
            f"{s.last_val[0]} {fmt(s.last_val[1])}" if s.last_val else "-",
        )
        for s in summaries
    ]
    header = (
        "run",
        "strategy",
        "diagnosis",
        "samples/s",
        "utilisation %",
        "data wait %",
        "peak memory GB",
        "last validation",
    )
    return table_html(rows, header, "comparison-table", numeric_from=3)


def render_comparison(run_paths: Sequence[str | os.PathLike], out_dir: str | os.PathLike | None = None) -> Path:
    """Read every run and write one comparison page, ``index.html``, to ``out_dir``.

    Args:
        run_paths: two or more run folders (each as :func:`~lightning_mgpu.dashboard.reader.read_run` takes them).
        out_dir: where to write (default: ``comparison`` in the runs' common parent folder).

    Returns:
        The page's path.

    Raises:
        FileNotFoundError, RunFormatError: a path is not a run (named in the message).
        MissingDependencyError: plotly is not installed (the ``dashboard`` extra).

    Example::

        render_comparison(["runs/dp/logs/version_0", "runs/ddp/logs/version_0"])  # runs/comparison/index.html
    """
    runs = [read_run(path) for path in run_paths]
    common = Path(os.path.commonpath([str(run.path.resolve()) for run in runs]))
    names = [run_name(run, common) for run in runs]
    if len(set(names)) < len(names):  # the same folder name twice: the full paths tell them apart
        names = [str(run.path) for run in runs]
    summaries = [summarise(run, name) for run, name in zip(runs, names)]
    charts = comparison_charts(runs, names)
    out = Path(out_dir) if out_dir is not None else common / "comparison"
    out.mkdir(parents=True, exist_ok=True)
    plotly = require("plotly", "the dashboard")
    state = {
        "version": 0,
        "last_step": 0,
        "figures": {c.id: figure_json(c) for c in charts},
        "regions": {},
        "main": "",
    }
    runs_html = "".join(f"<li>{escape(name)}: {escape(run.path)}</li>" for run, name in zip(runs, names))
    main = (
        f'<section id="runs"><h2>Runs side by side</h2>{_summary_table(summaries)}'
        f"<p class=\"src\">Window means over each run (the GPU monitor's metrics); diagnosis from each run's"
        f" diagnosis.json or its last logged values.</p></section>"
        '<section id="charts"><h2>Compared</h2><div'
        f' class="grid">{"".join(chart_html(c, None) for c in charts)}</div></section>'
        f'<section id="paths"><h2>Folders</h2><ul>{runs_html}</ul></section>'
    )
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,'
            ' initial-scale=1">',
            f"<title>{len(runs)} runs compared - lightning_mgpu dashboard</title><style>{CSS}</style>",
            f"<script>{plotly.offline.get_plotlyjs()}</script></head>",
            f'<body data-compare="{len(runs)}">',
            f'<header><h1>{len(runs)} runs compared</h1><div class="sub">{escape(common)}</div></header>',
            f"<main>{main}</main>",
            f'<script type="application/json" id="dashboard-data">{inline_json(state)}</script>',
            f"<script>{JS}</script></body></html>",
        ]
    )
    path = out / "index.html"
    atomic_write(path, lambda f: f.write(page.encode("utf-8")))
    return path


def main(args: argparse.Namespace) -> int:
    """``lightning-mgpu dashboard RUN_A RUN_B ... [--out DIR]``; returns the exit code."""
    from lightning_mgpu.dashboard.reader import RunFormatError

    try:
        path = render_comparison(args.run, args.out)
    except (FileNotFoundError, RunFormatError) as err:
        sys.stderr.write(f"lightning-mgpu dashboard: error: {err}\n")
        return 2
    sys.stdout.write(f"comparison: {path}\n")
    return 0
