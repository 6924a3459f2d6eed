"""A rank's time line: every background poll of the monitor, at wall time, with the training phase around it.

The window means (``gpu/rank0/util_pct`` every ``log_every_n_steps``) say how a window went; the time line is what
Neptune's monitoring tab showed: one continuous line per device at the sampling interval, where a dip during
validation or a stall while data loads can be seen. :class:`~lightning_mgpu.monitoring.GPUUtilizationMonitor` keeps
one per rank and writes it to ``<log_dir>/timeline/rank<R>.jsonl``, one JSON object a line::

    {"t": 1732748400.12, "step": 41, "phase": "train", "values": {"gpu/rank0/util_pct": 97.0, ...}}
    {"t": 1732748401.90, "step": 46, "phase": "validation", "mark": true, "values": {}}   # a phase change

Phases: ``train``, ``validation``, ``checkpoint`` (from a save until the next batch), ``idle`` (before the first
batch and after the last). The file grows by appending; its size stays bounded: past ``max_points`` the older half
is thinned to every other point (phase changes are always kept) and the file rewritten whole, atomically.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning_mgpu.utilities.files import atomic_write

#: The phases a time line records.
PHASES = ("idle", "train", "validation", "checkpoint")
#: Where a rank's time line lives, under the run's log folder.
TIMELINE_DIR = "timeline"


def timeline_path(log_dir: str | os.PathLike, rank: int) -> Path:
    """``<log_dir>/timeline/rank<R>.jsonl``."""
    return Path(log_dir) / TIMELINE_DIR / f"rank{rank}.jsonl"


class Timeline:
    """One rank's time line, kept in memory (bounded) and appended to its file at each :meth:`flush`.

    Thread-safe: the monitor's sampling thread calls :meth:`record`; the training thread calls :meth:`set_phase`,
    :meth:`set_step` and :meth:`flush`.

    Args:
        path: the JSON-lines file (its folder is created); ``None`` keeps the time line in memory only.
        max_points: points kept (and written) at most; older ones are thinned past it. At the default 0.5 s this
            is about 3 hours at full resolution.

    Example::

        timeline = Timeline(timeline_path(trainer.log_dir, trainer.global_rank))
        timeline.set_phase("train", time.time())
        timeline.record(time.time(), {"gpu/rank0/util_pct": 97.0})
        timeline.flush()
    """

    def __init__(self, path: str | os.PathLike | None, max_points: int = 20_000) -> None:
        if max_points < 4:
            raise ValueError(f"Timeline(max_points={max_points}): keep at least 4 points")
        self.path = Path(path) if path is not None else None
        self.max_points = max_points
        # A run that resumes into the same log folder continues the file: what is there stays (thinned if need be).
        self.points: list[dict[str, Any]] = read_timeline(self.path) if self.path and self.path.is_file() else []
        self.phase = "idle"
        self.step = 0
        self._lock = threading.Lock()
        self._written = len(self.points)  # points of self.points already in the file
        self._rewrite = False  # the file is rewritten whole after thinning
        self._bound()

    def set_step(self, step: int) -> None:
        self.step = step

    def set_phase(self, phase: str, t: float) -> None:
        """Enter ``phase`` at wall time ``t`` (a mark point; nothing when the phase does not change)."""
        if phase == self.phase:
            return
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; one of {PHASES}")
        with self._lock:
            self.phase = phase
            self.points.append({"t": t, "step": self.step, "phase": phase, "mark": True, "values": {}})
            self._bound()

    def record(self, t: float, values: dict[str, float]) -> None:
        """One poll's readings at wall time ``t``."""
        if not values:
            return
        with self._lock:
            self.points.append({"t": t, "step": self.step, "phase": self.phase, "values": values})
            self._bound()

    def _bound(self) -> None:
        if len(self.points) <= self.max_points:
            return
        # Thin the older half to every other point; phase changes stay, so the shading stays exact.
        half = len(self.points) // 2
        old, new = self.points[:half], self.points[half:]
        self.points = [p for i, p in enumerate(old) if p.get("mark") or i % 2 == 0] + new
        self._rewrite = True

    def since(self, index: int) -> tuple[list[dict[str, Any]], int]:
        """The points from ``index`` on, and the index to ask from next time (thinning restarts it at the end)."""
        with self._lock:
            if index > len(self.points):
                index = len(self.points)
            return list(self.points[index:]), len(self.points)

    def flush(self) -> None:
        """Append the points not yet in the file (or rewrite it whole after thinning)."""
        if self.path is None:
            return
        with self._lock:
            rewrite, self._rewrite = self._rewrite, False
            pending = list(self.points) if rewrite else self.points[self._written :]
            self._written = len(self.points)
        if not pending and not rewrite:
            return
        text = "".join(json.dumps(p, separators=(",", ":")) + "\n" for p in pending)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if rewrite:
            atomic_write(self.path, lambda f: f.write(text.encode()))
        else:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(text)


def read_timeline(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The points of one time line file, in time order (a line cut short by a kill is skipped)."""
    points = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            point = json.loads(line)
        except ValueError:
            continue
        if isinstance(point, dict) and "t" in point:
            points.append(point)
    return sorted(points, key=lambda p: p["t"])


def phase_spans(points: Iterable[dict[str, Any]], end: float | None = None) -> list[tuple[float, float, str]]:
    """``(start, stop, phase)`` for each stretch of one phase, in time order (``end``: where the last one stops)."""
    spans: list[tuple[float, float, str]] = []
    current: tuple[float, str] | None = None
    last_t = None
    for point in points:
        t, phase = float(point["t"]), str(point.get("phase", "train"))
        last_t = t
        if current is None:
            current = (t, phase)
        elif phase != current[1]:
            spans.append((current[0], t, current[1]))
            current = (t, phase)
    if current is not None and last_t is not None:
        spans.append((current[0], max(end or last_t, last_t), current[1]))
    return [s for s in spans if s[1] >= s[0]]
