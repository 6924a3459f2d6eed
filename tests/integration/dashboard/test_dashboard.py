"""The local dashboard: both run readers, the page's charts carrying the logged values, the PNGs,
the diagnosis table, headless Chromium rendering, and the errors for folders of neither kind.

The runs are synthetic: per-rank monitor values are logged through a real CSVLogger and a real
NeptuneLogger(mode="offline"), so these tests do not depend on the GPU monitor's timing.

The tests that launch processes; the in-process ones are in ``tests/unit/dashboard/test_dashboard.py``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger

from lightning_mgpu.dashboard.charts import LineChart
from lightning_mgpu.dashboard.compare import render_comparison
from lightning_mgpu.dashboard.reader import read_run
from lightning_mgpu.dashboard.render import build_sections, render_dashboard
from tests.helpers.browser import Browser
from tests.helpers.launch import TRAIN, finish, run, run_python, start
from tests.helpers.runif import RunIf
from tests.unit.dashboard.test_dashboard import (  # noqa: F401
    DEVICES,
    HPARAMS,
    STEPS,
    VAL_STEPS,
    _Dom,
    csv_run,
    log_synthetic,
    monitor_metrics,
    parse,
    wait_pct,
)

_PROBE = """(function(){
  var out={};
  document.querySelectorAll('.js-plotly-plot').forEach(function(el){
    out[el.id]=el.data.filter(function(t){return t.meta&&t.meta.key;})
      .map(function(t){return t.meta.key+'='+t.y.length;});
  });
  return out;
})()"""


_HOVER = """(function(){
  var el=document.getElementById('plot-gpu-utilisation');
  var i=el.data.findIndex(function(t){return t.meta&&t.meta.key==='gpu/rank1/util_pct';});
  Plotly.Fx.hover(el,[{curveNumber:i,pointNumber:el.data[i].x.length-1}]);
  return el.querySelector('.hoverlayer').textContent;
})()"""


@RunIf(chromium=True, plotly=True)
@pytest.mark.timeout(240)
def test_page_renders_offline_in_headless_chromium(csv_run: Path, tmp_path: Path) -> None:
    page = render_dashboard(csv_run, out_dir=tmp_path / "page", png=False).html
    with Browser(tmp_path / "profile") as browser:
        browser.open(page.as_uri())
        rendered = int(browser.wait_for("document.body.dataset.rendered", timeout=60))
        charts = {a["data-chart"] for a in parse(page.read_text()).with_attr("data-chart")}
        assert rendered == len(charts) == 8
        # The browser's own network log: the page itself, from disk, and nothing else.
        assert browser.requests() == [page.as_uri()]
        assert browser.console_errors() == []
        # Every rank's series is drawn, with all its points.
        drawn = browser.evaluate(_PROBE)
        assert sorted(drawn["plot-gpu-utilisation"]) == [f"gpu/{d}/util_pct={len(STEPS)}" for d in DEVICES]
        assert sorted(drawn["plot-throughput"])[0].startswith("throughput/rank0/samples_per_sec=")
        # Hover read-out on rank 1's last point shows its logged value.
        hover = browser.evaluate(_HOVER)
        assert f"{monitor_metrics(STEPS[-1])['gpu/rank1/util_pct']:.4g}" in hover and "rank1" in hover, hover
        shot = browser.screenshot(tmp_path / "shot.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000  # charts, not a blank page


def _start_server(run: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    proc = start(
        [sys.executable, "-m", "lightning_mgpu", "dashboard", str(run), "--serve", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not match:
        proc.kill()
        raise AssertionError(f"no URL from --serve: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, match.group(0)


def _stop(proc: subprocess.Popen) -> str:
    """Ctrl-C the server; it must stop within 20 s with exit 0. Returns its output."""
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    return finish(proc, timeout=20, expect=0, what="--serve after Ctrl-C")


@RunIf(plotly=True)
@pytest.mark.timeout(120)
def test_serve_started_before_training_waits_for_the_run(tmp_path: Path) -> None:
    """The live view can be opened first: a folder that does not exist yet is waited on, then served."""
    run = tmp_path / "logs"
    proc = start(
        [sys.executable, "-m", "lightning_mgpu", "dashboard", str(run), "--serve", "--port", "0", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert "waiting for" in (proc.stdout.readline() if proc.stdout else "")
        logger = CSVLogger(tmp_path, name="logs")  # writes logs/version_0, as training would
        for step in STEPS[:3]:
            logger.log_metrics(monitor_metrics(step), step=step)
        logger.save()
        line = proc.stdout.readline() if proc.stdout else ""
        assert re.search(r"serving .* live at http://127\.0\.0\.1:\d+/", line), line
    finally:
        out = _stop(proc)
    assert "dashboard: stopped" in out


@RunIf(chromium=True, plotly=True)
@pytest.mark.timeout(240)
def test_serve_shows_a_point_logged_after_the_page_opened(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, name="live")
    for step in STEPS[:5]:
        logger.log_metrics(monitor_metrics(step), step=step)
    logger.save()
    proc, url = _start_server(Path(logger.log_dir), "--port", "0", "--interval", "0.3")
    try:
        with Browser(tmp_path / "profile") as browser:
            browser.open(url)
            browser.wait_for("document.body.dataset.rendered", timeout=60)
            assert float(browser.evaluate("document.body.dataset.lastStep")) == STEPS[4]
            # Training writes a new point while the page is open.
            logger.log_metrics(monitor_metrics(STEPS[5]), step=STEPS[5])
            logger.save()
            step = browser.wait_for(
                f"document.body.dataset.lastStep === '{STEPS[5]}' && document.body.dataset.lastStep", timeout=30
            )
            assert float(step) == STEPS[5]
            points = browser.evaluate(
                "document.getElementById('plot-gpu-utilisation').data.filter(function(t){return t.meta&&t.meta.key;})"
                ".map(function(t){return t.y.length;})"
            )
            assert points == [6, 6, 6]  # every rank's series grew, in place (no reload: the page kept its state)
            assert browser.evaluate("performance.getEntriesByType('navigation').length") == 1
            assert all(u.startswith(url) for u in browser.requests()), browser.requests()
    finally:
        out = _stop(proc)
    assert "dashboard: stopped" in out


def test_serve_on_a_busy_port_names_the_port_and_the_fix(csv_run: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run(
            [sys.executable, "-m", "lightning_mgpu", "dashboard", str(csv_run), "--serve", "--port", str(port)],
            timeout=120,
            expect=2,
        )
    assert f"port {port} on 127.0.0.1 is already in use" in proc.stderr and "--port 0" in proc.stderr


# The time line chart's points per device, and the names of its shaded stretches, as the browser drew them.
_TIMELINE_PROBE = """(function(){var el=document.getElementById('plot-timeline-cpu-util');
  return {points: el.data.filter(function(t){return t.meta&&t.meta.key;}).map(function(t){
            return [t.name, t.y.filter(function(y){return y!==null;}).length];}),
          shapes: (el.layout.shapes||[]).map(function(s){return s.name;})};})()"""


def _save_for_docs(shot: Path, name: str) -> None:
    """The screenshots docs/neptune_and_dashboard.md shows: copied there when LIGHTNING_MGPU_DOCS_SCREENSHOTS names
    the folder (a person refreshes them; the suite never writes into the repository)."""
    folder = os.environ.get("LIGHTNING_MGPU_DOCS_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / name).write_bytes(shot.read_bytes())


@RunIf(chromium=True, plotly=True)
@pytest.mark.timeout(480)
def test_real_ddp_and_dp_runs_on_the_time_line_and_compared_in_chromium(tmp_path: Path) -> None:
    """The main job under ddp (2 ranks) and dp, 3 epochs on the CPU with the monitor: the ddp page draws at least
    20 points per device over wall time with validation shaded, and the comparison page renders both runs."""
    runs = {}
    for strategy, devices in (("ddp", "2"), ("dp", "1")):
        out = tmp_path / strategy
        run_python(
            [str(TRAIN), "--strategy", strategy, "--devices", devices, "--max-epochs", "3", "--gpu-monitor"]
            + ["--monitor-interval", "0.02", "--logger", "csv", "--output-dir", str(out)],
            timeout=300,
        )
        runs[strategy] = out / "logs" / "version_0"
    # The monitor's charts on the step axis as well: each device's line at the time line's resolution, not one point
    # per logging window (2 or 3 on this run). The training curves are what the module logs, as often as it does.
    monitor = ("utilisation", "step-time", "throughput")
    sections = build_sections(read_run(runs["ddp"]))
    charts = {c.id: c for s in sections if s.id in monitor for c in s.charts if isinstance(c, LineChart)}
    assert {"cpu-utilisation", "cpu-memory", "step-time", "throughput"} <= set(charts), sorted(charts)
    short = {(c.id, line.label): len(line.points) for c in charts.values() for line in c.lines if len(line.points) < 20}
    assert not short, short
    page = render_dashboard(runs["ddp"], png=False).html
    compare = render_comparison([runs["dp"], runs["ddp"]], tmp_path / "comparison")
    with Browser(tmp_path / "profile", window=(1400, 1500)) as browser:
        browser.open(page.as_uri())
        browser.wait_for("document.body.dataset.rendered", timeout=60)
        drawn = browser.evaluate(_TIMELINE_PROBE)
        points = dict(drawn["points"])
        assert set(points) == {"rank0", "rank1"} and min(points.values()) >= 20, drawn
        assert "validation" in drawn["shapes"], drawn
        assert browser.console_errors() == []
        shot = browser.screenshot(tmp_path / "single.png")
        _save_for_docs(shot, "dashboard_single_run.png")
    with Browser(tmp_path / "profile-compare", window=(1400, 900)) as browser:
        browser.open(compare.as_uri())
        assert int(browser.wait_for("document.body.dataset.rendered", timeout=60)) == 2
        names = browser.evaluate(
            "Array.from(document.querySelectorAll('#comparison-table tbody tr td:first-child'))"
            ".map(function(td){return td.textContent;})"
        )
        assert names == ["dp/logs/version_0", "ddp/logs/version_0"], names
        traces = browser.evaluate(
            "document.getElementById('plot-compare-utilisation').data.filter(function(t){return t.meta&&t.meta.key;})"
            ".map(function(t){return [t.name, t.y.length];})"
        )
        assert [name for name, _ in traces] == names and all(n >= 10 for _, n in traces), traces
        assert browser.console_errors() == []
        shot = browser.screenshot(tmp_path / "compare.png")
        _save_for_docs(shot, "dashboard_comparison.png")
