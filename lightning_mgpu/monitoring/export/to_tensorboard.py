"""The time line into a TensorBoardLogger's folder: one TensorBoard run per rank, scalars at their wall time.

Each rank writes ``<version folder>/timeline/rank<R>/events.out.tfevents.*``: TensorBoard lists it as its own run
(``version_0/timeline/rank0``) beside the logger's, so the scalar tags are the monitor's keys unchanged
(``gpu/rank0/util_pct``, ``cpu/rank0/util_pct``, ``time/rank0/data_wait_pct``): the same chart shows the window means
of the logger's run and every sample of the time line. Each scalar carries the optimizer step and the sample's wall
time (TensorBoard's "Wall" and "Relative" axes). A folder of its own per rank also keeps TensorBoard's reader from
taking one rank's earlier steps for a restart and dropping them (it purges "orphaned" steps per run).

The phase goes in as text (tag ``phase``, one entry per change: TensorBoard's text tab) and as a number (tag
``phase_code``, :data:`~lightning_mgpu.monitoring.export.base.PHASE_LEGEND`), so it can be drawn beside utilisation;
TensorBoard has no shaded layout for scalars. The devices (torch's and NVML's index) and, on rank 0, the verdicts
are text too (``devices``, ``diagnosis``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_mgpu.monitoring.export.base import PHASE_CODES, PHASE_LEGEND, ExportContext
from lightning_mgpu.utilities.imports import is_available, require

#: Where a rank's TensorBoard run goes, under the logger's version folder.
RUN_DIR = "timeline"


def tensorboard_run_dir(log_dir: str, rank: int) -> Path:
    """``<log_dir>/timeline/rank<R>``."""
    return Path(log_dir) / RUN_DIR / f"rank{rank}"


def _summary_writer() -> Any:
    # The writer Lightning's TensorBoardLogger uses: torch's with tensorboard installed, else tensorboardX's.
    if is_available("tensorboard"):
        return require("torch.utils.tensorboard", "GPUUtilizationMonitor's time line in TensorBoard").SummaryWriter
    return require("tensorboardX", "GPUUtilizationMonitor's time line in TensorBoard").SummaryWriter


class TensorBoardTimelineExport:
    """A rank's time line as a TensorBoard run of its own."""

    kind = "tensorboard"

    def __init__(self, log_dir: str, context: ExportContext) -> None:
        self.context = context
        self.path = tensorboard_run_dir(log_dir, context.rank)
        self.writer: Any = _summary_writer()(log_dir=str(self.path))
        devices = "\n".join(f"- {label}: {info.describe()}" for label, info in sorted(context.devices.items()))
        self.writer.add_text("devices", devices or "cpu", global_step=0)
        self.writer.add_text("phase_codes", PHASE_LEGEND, global_step=0)

    def write(self, points: list[dict[str, Any]]) -> None:
        for point in points:
            t, step, phase = float(point["t"]), int(point.get("step", 0)), str(point.get("phase"))
            for key, value in point.get("values", {}).items():
                self.writer.add_scalar(key, float(value), global_step=step, walltime=t)
            self.writer.add_scalar("phase_code", float(PHASE_CODES.get(phase, -1)), global_step=step, walltime=t)
            if point.get("mark"):
                self.writer.add_text("phase", phase, global_step=step, walltime=t)
        self.writer.flush()

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        if verdicts:
            table = "| device | verdict |\n|---|---|\n" + "\n".join(
                f"| {d} | {v} |" for d, v in sorted(verdicts.items())
            )
            self.writer.add_text("diagnosis", table, global_step=0)
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()
