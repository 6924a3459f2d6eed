"""The time line into the bundle's ``NeptuneLogger`` run (rank 0): ``monitoring/timeline/<key>`` and
``monitoring/timeline/phase``, each value at its sample's wall time.

Only rank 0 holds a Neptune run (the logger opens none elsewhere), so only rank 0's time line goes in; the other
ranks' stay in their files (``<log_dir>/timeline/rank<R>.jsonl``).
"""

from __future__ import annotations

from typing import Any

from lightning_mgpu.monitoring.export.base import ExportContext

#: Where a Neptune run holds rank 0's time line.
TIMELINE_PREFIX = "monitoring/timeline"


class NeptuneTimelineExport:
    """Rank 0's time line into an open Neptune run (``logger.experiment``)."""

    kind = "neptune"

    def __init__(self, run: Any, context: ExportContext) -> None:
        self.run = run
        self.context = context

    def write(self, points: list[dict[str, Any]]) -> None:
        for point in points:
            if point.get("mark"):
                self.run[f"{TIMELINE_PREFIX}/phase"].append(point["phase"], timestamp=point["t"])
            for key, value in point["values"].items():
                self.run[f"{TIMELINE_PREFIX}/{key}"].append(value, timestamp=point["t"])

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        pass  # as before this module: the run gets the time line; the verdicts are in diagnosis.json

    def close(self) -> None:
        pass  # the logger owns the run
