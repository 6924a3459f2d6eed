"""bench_starved_gpu at its CPU size: both runs train under the monitor, the cache is built and then removed, and each
run leaves its logs, time line, diagnosis and dashboard for the report. Timings are the benchmark's, not checked
here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.harness.registry import BENCHMARKS
from lightning_mgpu.monitoring.diagnosis import load_diagnoses
from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf

VERDICTS = {"input-bound", "communication-bound", "low-utilisation-unexplained", "healthy", "compute-bound"}


@pytest.mark.extended  # the benchmark's own run: before a benchmark session, with --extended
@RunIf(plotly=True)
@pytest.mark.timeout(300)
def test_both_runs_are_diagnosed_and_leave_their_dashboards(tmp_path: Path) -> None:
    result, runs = tmp_path / "starved_gpu.json", tmp_path / "runs"
    dry = next(b for b in BENCHMARKS if b.name == "starved_gpu").args["dry"]  # the suite's own dry size
    run_python(
        ["-m", "benchmarks.bench_starved_gpu", *dry, "--runs-dir", str(runs), "--result", str(result)], timeout=240
    )
    out = json.loads(result.read_text())
    assert set(out["config"]["verdicts"]) == {"raw", "cached"} and set(out["config"]["verdicts"].values()) <= VERDICTS
    for name in ("raw", "cached"):
        run = runs / name / "version_0"
        diagnoses, _ = load_diagnoses(run / "diagnosis.json")
        assert diagnoses[0].verdict == out["config"]["verdicts"][name]
        assert (run / "timeline" / "rank0.jsonl").stat().st_size > 0
        assert (run / "dashboard" / "index.html").is_file() and (run / "dashboard" / "step-breakdown.png").is_file()
        assert out["figures"][f"{name}: samples/s (step clock)"]["value"] > 0
        assert 0 <= out["figures"][f"{name}: data wait %"]["value"] <= 100
    assert not (runs / "cache").exists()  # hundreds of MB at GPU size: never left behind
    assert out["figures"]["preprocess once (decode + resize every image), s"]["value"] > 0
    # The goals are the GPU's: on the CPU no figure claims one.
    assert all(f["goal"] is None for f in out["figures"].values())
