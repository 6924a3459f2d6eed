"""The monitor's time line as one table, for pandas, a spreadsheet or DuckDB: a row per point of every rank.

``lightning-mgpu dashboard RUN`` writes it beside the page (``timeline.csv``, and ``timeline.parquet`` where pyarrow
is installed) and links both from the page's time line section::

    import pandas as pd
    frame = pd.read_parquet("outputs/logs/version_0/dashboard/timeline.parquet")
    frame[frame.phase == "train"].groupby("rank")["cpu/rank0/util_pct"].mean()

Columns: ``rank``, ``time`` (Unix seconds), ``seconds`` (since the run's first point), ``step`` (optimizer steps so
far), ``phase`` (train, validation, checkpoint, idle), then one column per key of the time line
(``gpu/rank0/util_pct``, ``time/rank1/step_ms``, ...), empty where a point did not record that key.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from lightning_mgpu.dashboard.reader import RunData
from lightning_mgpu.utilities.files import atomic_write
from lightning_mgpu.utilities.imports import require

#: The columns every time line table starts with; the time line's keys follow, sorted.
COLUMNS = ("rank", "time", "seconds", "step", "phase")
CSV_NAME, PARQUET_NAME = "timeline.csv", "timeline.parquet"


#: ``(columns, rows)``: what :func:`timeline_table` returns
Table = tuple[list[str], list[dict[str, Any]]]


def timeline_table(run: RunData) -> Table:
    """``(columns, rows)`` of ``run``'s time lines, the rows in time order (ranks interleaved); empty without one."""
    points = [(rank, p) for rank in sorted(run.timelines) for p in run.timelines[rank]]
    if not points:
        return [], []
    t0 = min(float(p["t"]) for _, p in points)
    keys = sorted({key for _, p in points for key in p.get("values", {})})
    rows = [
        {
            "rank": rank,
            "time": float(p["t"]),
            "seconds": float(p["t"]) - t0,
            "step": p.get("step"),
            "phase": p.get("phase"),
            **{key: float(value) for key, value in p.get("values", {}).items()},
        }
        for rank, p in sorted(points, key=lambda rp: (float(rp[1]["t"]), rp[0]))
    ]
    return [*COLUMNS, *keys], rows


def write_timeline_csv(run: RunData, path: str | os.PathLike, table: Table | None = None) -> Path:
    """Write ``run``'s time line table to ``path`` as CSV (atomically); returns ``path``.

    Args:
        run: the run read by :func:`lightning_mgpu.dashboard.reader.read_run`.
        path: the file to write.
        table: :func:`timeline_table` of ``run``, where the caller has it already.

    Raises:
        ValueError: the run has no time line.
    """
    columns, rows = _table_or_refuse(run, table)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, lambda f: f.write(text.getvalue().encode("utf-8")))
    return Path(path)


def write_timeline_parquet(run: RunData, path: str | os.PathLike, table: Table | None = None) -> Path:
    """Write ``run``'s time line table to ``path`` as Parquet (atomically); returns ``path``.

    Args:
        run: the run read by :func:`lightning_mgpu.dashboard.reader.read_run`.
        path: the file to write.
        table: :func:`timeline_table` of ``run``, where the caller has it already.

    Raises:
        ValueError: the run has no time line.
        MissingDependencyError: pyarrow is not installed (the ``dashboard`` extra).
    """
    pa = require("pyarrow", "the time line's Parquet export")
    parquet = require("pyarrow.parquet", "the time line's Parquet export")
    columns, rows = _table_or_refuse(run, table)
    types = {
        "rank": pa.int32(),
        "time": pa.float64(),
        "seconds": pa.float64(),
        "step": pa.int64(),
        "phase": pa.string(),
    }
    table = pa.table(
        {c: pa.array([row.get(c) for row in rows], type=types.get(c, pa.float64())) for c in columns},
    )
    atomic_write(path, lambda f: parquet.write_table(table, f))
    return Path(path)


def _table_or_refuse(run: RunData, table: Table | None) -> Table:
    columns, rows = table if table is not None else timeline_table(run)
    if not rows:
        raise ValueError(
            f"{run.path} has no time line (timeline/rank<R>.jsonl): train with GPUUtilizationMonitor(timeline=True),"
            " the default, to record one."
        )
    return columns, rows
