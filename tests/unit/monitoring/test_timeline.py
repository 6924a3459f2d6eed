"""``lightning_mgpu.monitoring.timeline``: a rank's samples at wall time with their phase, bounded, appended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lightning_mgpu.monitoring.timeline import Timeline, phase_spans, read_timeline, timeline_path


def test_points_phases_and_the_file(tmp_path: Path) -> None:
    path = timeline_path(tmp_path, 1)
    assert path == tmp_path / "timeline" / "rank1.jsonl"
    timeline = Timeline(path)
    timeline.record(10.0, {"cpu/rank1/util_pct": 50.0})
    timeline.set_phase("train", 10.5)
    timeline.set_step(3)
    timeline.record(11.0, {"cpu/rank1/util_pct": 90.0})
    timeline.set_phase("train", 11.2)  # no change: no mark
    timeline.set_phase("validation", 11.5)
    timeline.record(12.0, {})  # nothing read: nothing kept
    timeline.flush()
    points = read_timeline(path)
    assert [(p["t"], p["phase"], bool(p.get("mark"))) for p in points] == [
        (10.0, "idle", False),
        (10.5, "train", True),
        (11.0, "train", False),
        (11.5, "validation", True),
    ]
    assert points[2]["step"] == 3 and points[2]["values"] == {"cpu/rank1/util_pct": 90.0}
    # A later flush appends only what is new; a line cut short by a kill is skipped when read.
    timeline.record(13.0, {"cpu/rank1/util_pct": 10.0})
    timeline.flush()
    with path.open("a") as f:
        f.write('{"t": 14.0, "pha')
    assert [p["t"] for p in read_timeline(path)] == [10.0, 10.5, 11.0, 11.5, 13.0]
    with pytest.raises(ValueError, match="unknown phase"):
        timeline.set_phase("eval", 15.0)


def test_bounded_thinning_keeps_every_phase_change_and_the_newest_points(tmp_path: Path) -> None:
    timeline = Timeline(tmp_path / "t.jsonl", max_points=100)
    for i in range(1000):
        if i % 97 == 0:
            timeline.set_phase("validation" if (i // 97) % 2 else "train", float(i) - 0.5)
        timeline.record(float(i), {"v": float(i)})
        if i % 50 == 0:
            timeline.flush()
    timeline.flush()
    points = read_timeline(tmp_path / "t.jsonl")
    assert len(points) <= 100 and points == sorted(points, key=lambda p: p["t"])
    marks = [p["t"] for p in points if p.get("mark")]
    assert marks == [float(i) - 0.5 for i in range(0, 1000, 97)]  # every phase change survives
    assert points[-1]["t"] == 999.0 and points[-2]["t"] == 998.0  # the newest at full resolution
    # The file is the memory: whole, in order, nothing twice.
    assert [p["t"] for p in points] == [p["t"] for p in timeline.points]


def test_a_resumed_run_continues_the_file(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    first = Timeline(path)
    first.record(1.0, {"v": 1.0})
    first.flush()
    second = Timeline(path)
    second.record(2.0, {"v": 2.0})
    second.flush()
    assert [p["t"] for p in read_timeline(path)] == [1.0, 2.0]
    assert len(path.read_text().splitlines()) == 2 and all(json.loads(line) for line in path.read_text().splitlines())


def test_phase_spans() -> None:
    points = [
        {"t": 0.0, "phase": "idle"},
        {"t": 1.0, "phase": "train"},
        {"t": 2.0, "phase": "train"},
        {"t": 3.0, "phase": "validation"},
        {"t": 3.5, "phase": "checkpoint"},
        {"t": 4.0, "phase": "train"},
    ]
    assert phase_spans(points, end=5.0) == [
        (0.0, 1.0, "idle"),
        (1.0, 3.0, "train"),
        (3.0, 3.5, "validation"),
        (3.5, 4.0, "checkpoint"),
        (4.0, 5.0, "train"),
    ]
    assert phase_spans([]) == []
