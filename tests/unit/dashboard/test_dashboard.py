"""The local dashboard: both run readers, the page's charts carrying the logged values, the PNGs,
the diagnosis table, headless Chromium rendering, and the errors for folders of neither kind.

The runs are synthetic: per-rank monitor values are logged through a real CSVLogger and a real
NeptuneLogger(mode="offline"), so these tests do not depend on the GPU monitor's timing.

The in-process tests; the ones that launch processes are in ``tests/integration/dashboard/test_dashboard.py``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from lightning.pytorch.loggers import CSVLogger

from lightning_mgpu.cli import main as cli_main
from lightning_mgpu.dashboard.reader import (
    CSV_KIND,
    NEPTUNE_KIND,
    TENSORBOARD_KIND,
    RunFormatError,
    read_run,
)
from lightning_mgpu.dashboard.render import render_dashboard
from lightning_mgpu.monitoring.diagnosis import Diagnosis, write_diagnoses
from tests.helpers.runif import RunIf, require_or_skip

DEVICES = ("rank0", "rank1", "rank2")


STEPS = list(range(0, 200, 10))


VAL_STEPS = [s for s in STEPS if s % 50 == 40]


HPARAMS = {"lr": 0.05, "batch_size": 32, "nested": {"width": 8}}


def wait_pct(rank: int) -> float:
    return 55.0 if rank == 1 else 3.0 + rank  # rank 1 starves for data


def monitor_metrics(step: int) -> dict[str, float]:
    """What GPUUtilizationMonitor logs at ``step`` for 3 ranks (rank 1 input-bound)."""
    m: dict[str, float] = {}
    total = 0.0
    for r, d in enumerate(DEVICES):
        util = (35.0 if r == 1 else 92.0) + (step % 30) / 10
        sps = (400.0 if r == 1 else 1000.0) + r + step / 100
        total += sps
        m |= {
            f"gpu/{d}/util_pct": util,
            f"gpu/{d}/util_pct_min": util - 8,
            f"gpu/{d}/util_pct_max": min(100.0, util + 5),
            f"gpu/{d}/mem_used_gb": 20.0 + 2 * r + step / 1000,
            f"gpu/{d}/mem_total_gb": 80.0,
            f"time/{d}/data_wait_pct": wait_pct(r),
            f"time/{d}/comm_pct": 4.0 if r == 1 else 10.0,
            f"time/{d}/step_ms": 100.0 + 5 * r,
            f"time/{d}/data_wait_ms": wait_pct(r) * 1.5,
            f"throughput/{d}/samples_per_sec": sps,
        }
    m["throughput/samples_per_sec"] = total
    m["throughput/mfu"] = 0.25
    m["train_loss"] = 2.0 * math.exp(-step / 80)
    m["lr-SGD"] = 0.05
    return m


def log_synthetic(logger: Any) -> None:
    logger.log_hyperparams(HPARAMS)
    for step in STEPS:
        logger.log_metrics(monitor_metrics(step), step=step)
        if step in VAL_STEPS:
            logger.log_metrics({"val_loss": 1.0 / (step + 10), "val_acc": step / 200}, step=step)


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logger = CSVLogger(tmp_path_factory.mktemp("csv"), name="logs")
    log_synthetic(logger)
    logger.save()
    # A diagnosis that differs from what the values would give, to prove the file wins.
    written = [
        Diagnosis("rank0", "communication-bound", ["from the json file"], {"comm_pct": 31.0, "gpu_util_pct": 70.0})
    ]
    write_diagnoses(Path(logger.log_dir) / "diagnosis.json", written, step=190)
    return Path(logger.log_dir)


@pytest.fixture(scope="module")
def neptune_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_or_skip("neptune")
    from lightning_mgpu.loggers import NeptuneLogger

    data_dir = tmp_path_factory.mktemp("neptune")
    mp = pytest.MonkeyPatch()
    mp.setenv("NEPTUNE_DATA_DIRECTORY", str(data_dir))
    try:
        logger = NeptuneLogger(mode="offline", name="synthetic")
        log_synthetic(logger)
        logger.finalize("success")
        run_dir = logger.offline_dir
        logger.stop()
    finally:
        mp.undo()
    assert run_dir is not None
    return run_dir


class _Dom(HTMLParser):
    """Collects every element's attributes, the text of elements, and the page's embedded figure JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self._in_data = False
        self.data_text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        self._in_data = tag == "script" and attributes.get("id") == "dashboard-data"

    def handle_endtag(self, tag: str) -> None:
        self._in_data = False

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.data_text += data
        elif data.strip():
            self.texts.append(data.strip())

    @property
    def state(self) -> dict[str, Any]:
        return json.loads(self.data_text)

    def series(self, chart: str) -> dict[str, dict[str, list[float]]]:
        """``metric key -> {"x": steps, "y": values}`` for the line traces of one chart."""
        figure = self.state["figures"][chart]
        return {
            t["meta"]["key"]: {"x": t["x"], "y": t["y"], "color": t["line"]["color"]}
            for t in figure["data"]
            if "key" in t.get("meta", {})
        }

    def segments(self, chart: str) -> dict[tuple[str, str], float]:
        out = {}
        for trace in self.state["figures"][chart]["data"]:
            for device, value in zip(trace["y"], trace["x"]):
                out[(device, trace["meta"]["segment"])] = value
        return out

    def with_attr(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.elements if name in attrs]


def parse(text: str) -> _Dom:
    dom = _Dom()
    dom.feed(text)
    return dom


def assert_carries_logged_values(dom: _Dom) -> None:
    last = monitor_metrics(STEPS[-1])
    util = dom.series("gpu-utilisation")
    assert set(util) == {f"gpu/{d}/util_pct" for d in DEVICES}
    for d in DEVICES:
        trace = util[f"gpu/{d}/util_pct"]
        assert trace["x"] == STEPS
        assert trace["y"] == [pytest.approx(monitor_metrics(s)[f"gpu/{d}/util_pct"], rel=1e-5) for s in STEPS]
    memory = dom.series("gpu-memory")
    assert memory["gpu/rank2/mem_used_gb"]["y"][-1] == pytest.approx(last["gpu/rank2/mem_used_gb"])
    assert memory["gpu/*/mem_total_gb"]["y"][-1] == 80.0
    # One colour per device in every chart.
    for d in DEVICES:
        assert util[f"gpu/{d}/util_pct"]["color"] == memory[f"gpu/{d}/mem_used_gb"]["color"]
    assert len({util[f"gpu/{d}/util_pct"]["color"] for d in DEVICES}) == len(DEVICES)
    throughput = dom.series("throughput")
    assert throughput["throughput/samples_per_sec"]["y"][-1] == pytest.approx(last["throughput/samples_per_sec"])
    assert dom.series("mfu")["throughput/mfu"]["y"][-1] == pytest.approx(25.0)
    assert dom.series("loss")["train_loss"]["y"][-1] == pytest.approx(last["train_loss"], rel=1e-5)
    assert dom.series("loss")["val_loss"]["y"][-1] == pytest.approx(1.0 / (VAL_STEPS[-1] + 10), rel=1e-5)
    assert dom.series("accuracy")["val_acc"]["y"][-1] == pytest.approx(VAL_STEPS[-1] / 200)
    # Step-time breakdown: mean data wait / communication / the rest, per device.
    segments = dom.segments("step-breakdown")
    for r, d in enumerate(DEVICES):
        comm = 4.0 if r == 1 else 10.0
        assert segments[(d, "data wait")] == pytest.approx(wait_pct(r))
        assert segments[(d, "communication")] == pytest.approx(comm)
        assert segments[(d, "compute")] == pytest.approx(100.0 - wait_pct(r) - comm)


def verdicts(dom: _Dom) -> dict[str, str]:
    return {a["data-device"]: a["data-verdict"] for a in dom.with_attr("data-verdict")}


def test_csv_and_neptune_readers_agree(csv_run: Path, neptune_run: Path) -> None:
    csv, nep = read_run(csv_run), read_run(neptune_run)
    assert (csv.kind, nep.kind) == (CSV_KIND, NEPTUNE_KIND)
    assert set(csv.series) == set(nep.series) == set(monitor_metrics(0)) | {"val_loss", "val_acc"}
    for key, points in csv.series.items():
        assert [s for s, _ in points] == [s for s, _ in nep.series[key]], key
        assert [v for _, v in points] == pytest.approx([v for _, v in nep.series[key]], rel=1e-6), key
    assert csv.series["time/rank1/data_wait_pct"] == [(float(s), 55.0) for s in STEPS]
    assert csv.hparams == nep.hparams == {"lr": 0.05, "batch_size": 32, "nested/width": 8}
    assert csv.diagnosis_path == csv_run / "diagnosis.json" and nep.diagnosis_path is None
    assert nep.info["status"] == "success" and nep.info["name"] == "synthetic"


def test_parent_folders_resolve_to_the_newest_run(csv_run: Path, neptune_run: Path, tmp_path: Path) -> None:
    newer = csv_run.parent / "version_7"
    shutil.copytree(csv_run, newer, ignore=shutil.ignore_patterns("dashboard"))
    try:
        run = read_run(csv_run.parent)
        assert run.path == newer.resolve() and "showing the newest, version_7" in run.notes[0]
    finally:
        shutil.rmtree(newer)
    assert read_run(neptune_run.parent.parent).path == neptune_run.resolve()  # the NEPTUNE_DATA_DIRECTORY
    assert read_run(neptune_run / "data-1.log").path == neptune_run.resolve()


def test_damaged_inputs_are_read_without_running_or_hiding_anything(neptune_run: Path, tmp_path: Path) -> None:
    # A crash can cut the last operation short; the rest of the run must still show.
    copy = tmp_path / neptune_run.name
    shutil.copytree(neptune_run, copy)
    with open(copy / "data-1.log", "a") as f:
        f.write('{"obj": {"type": "LogFloats", "path": ["training", "train_lo')
    run = read_run(copy)
    assert len(run.series["train_loss"]) == len(STEPS) and any("skipped 1 unreadable line" in n for n in run.notes)
    # hparams.yaml may hold python-tagged objects: shown as text, never constructed.
    csv_dir = tmp_path / "csv"
    csv_dir.mkdir()
    (csv_dir / "metrics.csv").write_text("step,loss\n0,1.0\n1,\n2,0.5\n")
    (csv_dir / "hparams.yaml").write_text("lr: 0.1\nobj: !!python/object/apply:os.system ['echo pwned']\n")
    run = read_run(csv_dir)
    assert run.series == {"loss": [(0.0, 1.0), (2.0, 0.5)]}
    assert run.hparams == {"lr": 0.1, "obj": "<tag:yaml.org,2002:python/object/apply:os.system>"}


def test_a_folder_of_neither_kind_gets_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(RunFormatError) as err:
        read_run(tmp_path)
    message = str(err.value)
    assert "metrics.csv" in message and "data-1.log" in message and "notes.txt" in message
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_run(tmp_path / "missing")
    assert cli_main(["dashboard", str(tmp_path), "--no-png"]) == 2
    assert "neither a CSV-logger folder" in capsys.readouterr().err
    assert not (tmp_path / "dashboard").exists()


def test_csv_dashboard_page_and_pngs(csv_run: Path) -> None:
    result = render_dashboard(csv_run)
    assert result.html == csv_run / "dashboard" / "index.html"
    text = result.html.read_text()
    dom = parse(text)
    assert_carries_logged_values(dom)
    # diagnosis.json wins over recomputing.
    assert verdicts(dom) == {"rank0": "communication-bound"}
    assert "from diagnosis.json, written by GPUUtilizationMonitor at step 190" in text
    # Metrics that no chart shows are listed; hyperparameters too.
    assert "lr-SGD" in dom.texts and "nested/width" in dom.texts
    # Self-contained: no tag loads anything from elsewhere (plotly.js is inline; the browser test checks requests).
    assert not re.search(r"""<(script|link|img)\b[^>]*\b(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "Plotly.react" in text and 'id="dashboard-data"' in text
    # PNGs of the same charts, linked from the page.
    names = {p.name for p in result.pngs}
    charts = {a["data-chart"] for a in dom.with_attr("data-chart")}
    assert names == {f"{c}.png" for c in charts} and len(charts) == 8
    for png in result.pngs:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f'href="{png.name}"' in text


def test_a_notebook_shows_the_page_inline(csv_run: Path) -> None:
    """``render_dashboard(...)`` as a cell's last expression: the page itself in an iframe's srcdoc, unescaped by the
    browser back to the file's text."""
    import html as html_lib

    result = render_dashboard(csv_run, png=False)
    shown = result._repr_html_()
    assert shown.startswith('<iframe srcdoc="') and shown.endswith("</iframe>")
    srcdoc = shown[len('<iframe srcdoc="') : shown.index('" title=')]
    assert '"' not in srcdoc  # escaped: the attribute holds the whole page
    assert html_lib.unescape(srcdoc) == result.html.read_text()


def test_neptune_dashboard_diagnoses_from_logged_values(neptune_run: Path) -> None:
    result = render_dashboard(neptune_run, png=False)
    # Beside the run folder, not inside it: `neptune sync` deletes the run folder after uploading.
    assert result.html == neptune_run.parent.parent / "dashboards" / neptune_run.name / "index.html"
    assert result.pngs == []
    text = result.html.read_text()
    dom = parse(text)
    assert_carries_logged_values(dom)
    assert verdicts(dom) == {"rank0": "compute-bound", "rank1": "input-bound", "rank2": "compute-bound"}
    assert "computed with diagnose() from the last logged value" in text


def test_cli_writes_the_page_where_asked(csv_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    assert cli_main(["dashboard", str(csv_run), "--out", str(out), "--no-png"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]
    assert f"dashboard: {out / 'index.html'}" in capsys.readouterr().out


def test_missing_sections_say_how_to_get_them(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path, name="plain")
    logger.log_metrics({"train_loss": 1.0}, step=0)
    logger.log_metrics({"train_loss": 0.5}, step=1)
    logger.save()
    text = render_dashboard(logger.log_dir, png=False).html.read_text()
    assert "add lightning_mgpu.callbacks.GPUUtilizationMonitor()" in text
    assert parse(text).series("loss")["train_loss"]["y"] == [1.0, 0.5]


@pytest.fixture(scope="module")
def tensorboard_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path_factory.mktemp("tb"), name="logs")
    log_synthetic(logger)
    logger.finalize("success")
    return Path(logger.log_dir)


@RunIf(tensorboard=True)
def test_tensorboard_reader_agrees_with_csv(csv_run: Path, tensorboard_run: Path) -> None:
    tb, csv = read_run(tensorboard_run), read_run(csv_run)
    assert tb.kind == TENSORBOARD_KIND and tb.info["logger"] == "TensorBoardLogger"
    assert set(monitor_metrics(0)) | {"val_loss", "val_acc"} <= set(tb.series)
    for key, points in csv.series.items():
        assert [s for s, _ in tb.series[key]] == [s for s, _ in points], key
        assert [v for _, v in tb.series[key]] == pytest.approx([v for _, v in points], rel=1e-6), key
    assert tb.hparams["lr"] == 0.05
    assert read_run(tensorboard_run.parent).path == tensorboard_run.resolve()  # a parent folder finds the version
    result = render_dashboard(tensorboard_run, png=False)
    assert_carries_logged_values(parse(result.html.read_text()))


def test_serve_refuses_a_folder_without_a_run_before_binding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a run")  # a folder with files but no run: refused, not waited on
    assert cli_main(["dashboard", str(tmp_path), "--serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lightning-mgpu dashboard: error: ") and "neither a CSV-logger folder" in err


def test_the_errors_name_the_path_given_and_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["dashboard", str(tmp_path / "missing"), "--no-png"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "TensorBoard" in err and "CSV-logger" in err and "Neptune" in err
    stray = tmp_path / "notes.txt"
    stray.write_text("x")
    assert cli_main(["dashboard", str(stray), "--no-png"]) == 2
    assert f"RUN {str(stray)!r} (a file; its folder {str(tmp_path)!r})" in capsys.readouterr().err


def test_monitor_diagnosis_recorded_in_a_neptune_run_reaches_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_or_skip("neptune")
    from lightning_mgpu.loggers import NeptuneLogger

    monkeypatch.setenv("NEPTUNE_DATA_DIRECTORY", str(tmp_path / "nd"))
    stale = tmp_path / "nd" / "diagnosis.json"
    write_diagnoses(stale, [Diagnosis("rank9", "healthy", ["stale"], {})])
    os.utime(stale, (1, 1))  # from an old run: must not be taken
    logger = NeptuneLogger(mode="offline")
    log_synthetic(logger)
    logger.finalize("success")
    first = read_run(logger.offline_dir)
    assert first.diagnosis_text is None
    # The monitor writes trainer.log_dir/diagnosis.json (this logger's save_dir) at the end of fit.
    write_diagnoses(
        stale, [Diagnosis("rank1", "input-bound", ["raise num_workers"], {"data_wait_pct": 55.0})], step=190
    )
    logger.finalize("success")
    run_dir = logger.offline_dir
    logger.stop()
    text = render_dashboard(run_dir, png=False).html.read_text()
    assert verdicts(parse(text)) == {"rank1": "input-bound"}
    assert "the run&#x27;s recorded diagnosis.json" in text


def _timeline_run(root: Path, name: str, strategy: str, util: float) -> Path:
    """A CSV run with the monitor's time lines for two ranks: 40 samples each, a validation and a checkpoint save."""
    from lightning_mgpu.monitoring.timeline import Timeline, timeline_path

    logger = CSVLogger(root, name=name)
    log_synthetic(logger)
    logger.save()
    run = Path(logger.log_dir)
    write_diagnoses(run / "diagnosis.json", [Diagnosis("rank0", "compute-bound", ["fine"], {})], step=190)
    data = json.loads((run / "diagnosis.json").read_text())
    data["context"] = {"strategy": strategy, "world_size": 2}
    (run / "diagnosis.json").write_text(json.dumps(data))
    for rank in (0, 1):
        timeline = Timeline(timeline_path(run, rank))
        timeline.set_phase("train", 1000.0)
        for i in range(40):
            t = 1000.0 + 0.5 * i
            if i == 20:
                timeline.set_phase("validation", t - 0.1)
            if i == 26:
                timeline.set_phase("checkpoint", t - 0.1)
            if i == 28:
                timeline.set_phase("train", t - 0.1)
            low = 20.0 if 20 <= i < 26 else util  # the dip during validation
            timeline.record(t, {f"cpu/rank{rank}/util_pct": low + rank, f"cpu/rank{rank}/rss_gb": 0.4 + 0.001 * i})
        timeline.set_phase("idle", 1020.0)
        timeline.flush()
    return run


@RunIf(plotly=True)
def test_the_time_line_is_drawn_over_wall_time_with_validation_shaded(tmp_path: Path) -> None:
    from lightning_mgpu.dashboard.charts import TIME_AXIS
    from lightning_mgpu.dashboard.figures import figure_json
    from lightning_mgpu.dashboard.render import build_sections

    run = read_run(_timeline_run(tmp_path, "logs", "ddp", 90.0))
    assert sorted(run.timelines) == [0, 1] and run.context["strategy"] == "ddp"
    section = build_sections(run)[0]
    assert section.id == "timeline"
    util = next(c for c in section.charts if c.id == "timeline-cpu-util")
    assert util.x_label == TIME_AXIS and [line.label for line in util.lines] == ["rank0", "rank1"]
    assert all(len(line.points) == 40 for line in util.lines)
    assert util.lines[0].points[0] == (0.0, 90.0) and util.lines[0].points[20] == (10.0, 20.0)  # seconds since start
    assert [(phase, round(a, 2), round(b, 2)) for a, b, phase in util.shading] == [
        ("validation", 9.9, 12.9),
        ("checkpoint", 12.9, 13.9),
    ]
    figure = figure_json(util)
    shapes = figure["layout"]["shapes"]
    assert [s["name"] for s in shapes] == ["validation", "checkpoint"] and shapes[0]["x0"] == pytest.approx(9.9)
    assert {t["name"] for t in figure["data"] if t.get("meta", {}).get("phase")} == {
        "validation (shaded)",
        "checkpoint (shaded)",
    }
    assert figure["layout"]["yaxis"]["range"][1] >= 100  # every point inside the axis
    memory = next(c for c in section.charts if c.id == "timeline-cpu-mem")
    y_top = figure_json(memory)["layout"]["yaxis"]["range"][1]
    assert y_top > max(y for line in memory.lines for _, y in line.points) * 1.05  # headroom above the top line


@RunIf(plotly=True)
def test_the_step_charts_take_the_time_lines_resolution(tmp_path: Path) -> None:
    """Utilisation, step time and throughput per device at every step the time line has (not one point per logging
    window), and all devices' throughput summed across ranks that report at different steps."""
    from lightning_mgpu.dashboard.render import build_sections
    from lightning_mgpu.monitoring.timeline import Timeline, timeline_path

    logger = CSVLogger(tmp_path, name="logs")
    for step in (49, 99):  # two logging windows of the monitor
        window = {"throughput/samples_per_sec": 201.0}
        for rank in (0, 1):
            window |= {
                f"cpu/rank{rank}/util_pct": 50.0 + rank,
                f"throughput/rank{rank}/samples_per_sec": 100.0 + rank,
                f"time/rank{rank}/step_ms": 10.0 + rank,
            }
        logger.log_metrics(window, step=step)
    logger.save()
    run_dir = Path(logger.log_dir)
    for rank in (0, 1):
        timeline = Timeline(timeline_path(run_dir, rank))
        timeline.set_phase("train", 1000.0)
        for i in range(60):
            timeline.step = 2 * i + rank  # the ranks sample at different steps
            timeline.record(
                1000.0 + 0.5 * i,
                {
                    f"cpu/rank{rank}/util_pct": 50.0 + rank,
                    f"throughput/rank{rank}/samples_per_sec": 100.0 + rank,
                    f"time/rank{rank}/step_ms": 10.0 + rank,
                },
            )
        timeline.flush()
    run = read_run(run_dir)
    assert len(run.series["cpu/rank0/util_pct"]) == 2
    charts = {c.id: c for s in build_sections(run) for c in s.charts}
    util = charts["cpu-utilisation"]
    assert [len(line.points) for line in util.lines] == [60, 60] and util.lines[1].points[:2] == [
        (1.0, 51.0),
        (3.0, 51.0),
    ]
    step_lines = [line for line in charts["step-time"].lines if line.label.endswith(" step")]
    assert [len(line.points) for line in step_lines] == [60, 60]
    total, *devices = charts["throughput"].lines
    assert total.label == "all devices" and [len(line.points) for line in devices] == [60, 60]
    assert total.points[0] == (1.0, 201.0) and len(total.points) == 119 and {y for _, y in total.points} == {201.0}


@RunIf(plotly=True)
def test_runs_compared_on_one_page(tmp_path: Path) -> None:
    from lightning_mgpu.dashboard.compare import render_comparison

    dp = _timeline_run(tmp_path / "dp", "logs", "dp", 60.0)
    ddp = _timeline_run(tmp_path / "ddp", "logs", "ddp", 95.0)
    page = render_comparison([dp, ddp])
    assert page == tmp_path / "comparison" / "index.html"
    dom = parse(page.read_text())
    rows = [r for r in re.findall(r"<tr>(.*?)</tr>", page.read_text()) if "<td" in r]
    assert len(rows) == 2 and "dp/logs/version_0" in rows[0] and "ddp/logs/version_0" in rows[1]
    assert ">dp<" in rows[0] and ">ddp<" in rows[1] and "compute-bound" in rows[0]
    state = dom.state
    util = state["figures"]["compare-utilisation"]
    names = [t["name"] for t in util["data"] if t.get("meta", {}).get("key")]
    assert names == ["dp/logs/version_0", "ddp/logs/version_0"]
    means = {t["name"]: sum(t["y"]) / len(t["y"]) for t in util["data"] if t.get("meta", {}).get("key")}
    assert means["ddp/logs/version_0"] > means["dp/logs/version_0"]
    assert "compare-throughput" in state["figures"]
    assert cli_main(["dashboard", str(dp), str(ddp), "--out", str(tmp_path / "cmp")]) == 0
    assert (tmp_path / "cmp" / "index.html").is_file()
    assert cli_main(["dashboard", str(dp), str(tmp_path / "missing")]) == 2
