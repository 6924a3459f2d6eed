"""The time line as a table: CSV and Parquet beside the page, read back with the csv module and pyarrow."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from lightning.pytorch.loggers import CSVLogger

from lightning_mgpu.dashboard.export import COLUMNS, timeline_table, write_timeline_csv, write_timeline_parquet
from lightning_mgpu.dashboard.reader import read_run
from lightning_mgpu.monitoring.timeline import Timeline, timeline_path
from tests.helpers.runif import RunIf


def _run(root: Path, timeline: bool = True) -> Path:
    """A CSV run whose two ranks sampled 5 times each (rank 1 a little later), with a validation in between."""
    logger = CSVLogger(root, name="logs")
    logger.log_metrics({"cpu/rank0/util_pct": 50.0, "train_loss": 1.0}, step=4)
    logger.save()
    run = Path(logger.log_dir)
    if timeline:
        for rank in (0, 1):
            line = Timeline(timeline_path(run, rank))
            line.set_phase("train", 100.0)
            for i in range(5):
                line.step = i
                if i == 3:
                    line.set_phase("validation", 100.0 + i)
                values = {f"cpu/rank{rank}/util_pct": 10.0 * i + rank}
                if i % 2 == 0:  # the batches' timing, not in every point
                    values[f"time/rank{rank}/step_ms"] = 5.0 + i
                line.record(100.0 + i + 0.25 * rank, values)
            line.flush()
    return run


def test_the_table_has_a_row_per_point_in_time_order_and_a_column_per_key(tmp_path: Path) -> None:
    columns, rows = timeline_table(read_run(_run(tmp_path)))
    assert columns == [*COLUMNS, "cpu/rank0/util_pct", "cpu/rank1/util_pct", "time/rank0/step_ms", "time/rank1/step_ms"]
    sampled = [r for r in rows if any(k.startswith("cpu/") for k in r)]
    assert len(sampled) == 10 and [r["time"] for r in rows] == sorted(r["time"] for r in rows)
    first = sampled[0]
    assert first == {
        "rank": 0,
        "time": 100.0,
        "seconds": first["seconds"],
        "step": 0,
        "phase": "train",
        "cpu/rank0/util_pct": 0.0,
        "time/rank0/step_ms": 5.0,
    }
    assert {r["phase"] for r in rows} == {"train", "validation"}
    assert [r["step"] for r in sampled if r["rank"] == 1] == [0, 1, 2, 3, 4]


def test_csv_reads_back_with_empty_cells_where_a_point_has_no_value(tmp_path: Path) -> None:
    run = read_run(_run(tmp_path))
    path = write_timeline_csv(run, tmp_path / "timeline.csv")
    with path.open(newline="") as f:
        back = list(csv.DictReader(f))
    _, rows = timeline_table(run)
    assert len(back) == len(rows)
    row = next(r for r in back if r["rank"] == "1" and r["step"] == "1" and r["cpu/rank1/util_pct"])
    assert float(row["cpu/rank1/util_pct"]) == 11.0 and row["time/rank1/step_ms"] == "" and row["phase"] == "train"


def test_parquet_reads_back_typed(tmp_path: Path) -> None:
    parquet = pytest.importorskip("pyarrow.parquet")
    run = read_run(_run(tmp_path))
    table = parquet.read_table(write_timeline_parquet(run, tmp_path / "timeline.parquet"))
    columns, rows = timeline_table(run)
    assert table.column_names == columns and table.num_rows == len(rows)
    assert str(table.schema.field("step").type) == "int64" and str(table.schema.field("phase").type) == "string"
    assert table.column("cpu/rank1/util_pct").to_pylist() == [r.get("cpu/rank1/util_pct") for r in rows]


def test_a_run_without_a_time_line_is_refused_naming_how_to_record_one(tmp_path: Path) -> None:
    run = read_run(_run(tmp_path, timeline=False))
    with pytest.raises(ValueError, match=r"has no time line .* GPUUtilizationMonitor\(timeline=True\)"):
        write_timeline_csv(run, tmp_path / "timeline.csv")
    assert not (tmp_path / "timeline.csv").exists()


@RunIf(plotly=True)
def test_the_dashboard_writes_both_beside_the_page_and_links_them(tmp_path: Path) -> None:
    from lightning_mgpu.dashboard.render import render_dashboard

    result = render_dashboard(_run(tmp_path), tmp_path / "out", png=False)
    assert [p.name for p in result.exports] == ["timeline.csv", "timeline.parquet"]
    assert all(p.parent == result.html.parent and p.stat().st_size > 0 for p in result.exports)
    links = re.findall(
        r'<section id="timeline"><h2>[^<]*((?:<a class="export" href="[^"]+">[^<]+</a>\s*)+)', result.html.read_text()
    )
    assert links and re.findall(r'href="([^"]+)">([^<]+)<', links[0]) == [
        ("timeline.csv", "CSV"),
        ("timeline.parquet", "Parquet"),
    ]
    # A run without a time line: no section, nothing exported.
    assert render_dashboard(_run(tmp_path / "plain", timeline=False), tmp_path / "out2", png=False).exports == []
