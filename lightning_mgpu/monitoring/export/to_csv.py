"""The time line beside a CSVLogger's ``metrics.csv``: ``timeline_rank<R>.csv``, one row per sample.

Columns: ``time`` (wall time, s), ``step`` (optimizer steps), ``phase``, ``phase_change`` (1 on the row where a
phase starts; that row has no readings), then one column per monitor key (``gpu/rank0/util_pct``, ...), as
``metrics.csv`` names the window means. Rows are appended at each flush; a key seen for the first time (the first
window's ``time/...``) rewrites the file once with the wider header, as Lightning's CSV logger does.

Beside it, ``timeline_rank<R>_devices.csv`` names each device of the rank: its label, torch's index (``cuda:<i>``,
after ``CUDA_VISIBLE_DEVICES``), NVML's (physical) index, UUID and power limit.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from lightning_mgpu.monitoring.export.base import ExportContext
from lightning_mgpu.utilities.files import atomic_write

#: The columns before the readings.
FIXED_COLUMNS = ("time", "step", "phase", "phase_change")


def csv_timeline_path(log_dir: str, rank: int) -> Path:
    """``<log_dir>/timeline_rank<R>.csv``."""
    return Path(log_dir) / f"timeline_rank{rank}.csv"


def csv_devices_path(log_dir: str, rank: int) -> Path:
    """``<log_dir>/timeline_rank<R>_devices.csv``."""
    return Path(log_dir) / f"timeline_rank{rank}_devices.csv"


class CsvTimelineExport:
    """A rank's time line as a CSV file beside ``metrics.csv``."""

    kind = "csv"

    def __init__(self, log_dir: str, context: ExportContext) -> None:
        self.context = context
        self.path = csv_timeline_path(log_dir, context.rank)
        self.keys: list[str] = []
        devices = io.StringIO()
        writer = csv.writer(devices)
        writer.writerow(["device", "cuda_index", "nvml_index", "uuid", "power_limit_w"])
        for label, info in sorted(context.devices.items()):
            writer.writerow(
                [label, *("" if v is None else v for v in (info.cuda_index, info.nvml_index, info.uuid))]
                + ["" if info.power_limit_w is None else info.power_limit_w]
            )
        path = csv_devices_path(log_dir, context.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: f.write(devices.getvalue().encode()))
        if self.path.is_file():
            # A resumed fit in the same version folder goes on with the file, under its header.
            with self.path.open(newline="") as f:
                header = next(csv.reader(f), [])
            self.keys = [k for k in header if k not in FIXED_COLUMNS]

    def _row(self, point: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "time": f"{float(point['t']):.3f}",
            "step": int(point.get("step", 0)),
            "phase": point.get("phase", ""),
            "phase_change": int(bool(point.get("mark"))),
        }
        row.update(point.get("values", {}))
        return row

    def write(self, points: list[dict[str, Any]]) -> None:
        if not points:
            return
        rows = [self._row(p) for p in points]
        new = sorted({k for p in points for k in p.get("values", {})} - set(self.keys))
        if new or not self.path.exists():
            # A wider header: the rows so far are read back and written again under it (rare: new keys come early).
            old: list[dict[str, Any]] = []
            if self.path.is_file():
                with self.path.open(newline="") as f:
                    old = list(csv.DictReader(f))
            self.keys = sorted([*self.keys, *new])
            buffer = io.StringIO()
            writer = csv.DictWriter(buffer, fieldnames=[*FIXED_COLUMNS, *self.keys], restval="")
            writer.writeheader()
            writer.writerows([*old, *rows])
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, lambda f: f.write(buffer.getvalue().encode()))
            return
        with self.path.open("a", newline="") as f:
            csv.DictWriter(f, fieldnames=[*FIXED_COLUMNS, *self.keys], restval="").writerows(rows)

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        pass  # diagnosis.json is in the run's log folder already

    def close(self) -> None:
        pass  # every write closed its file
