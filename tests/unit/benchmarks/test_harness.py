"""The benchmark suite's logic on fixed inputs: ratios, failed arms, the report and its plots. No timing is asserted."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.harness import registry
from benchmarks.harness.report import BenchRun, markdown, terminal_table, write
from benchmarks.harness.result import ratio, write_result
from benchmarks.harness.stats import RatioSummary, paired_ratios, summarize

MACHINE = {
    "date": "2026-11-25 04:00 UTC",
    "cpu": "test CPU",
    "cores": 2,
    "gpus": [],
    "interconnect": "none",
    "os": "Linux",
    "python": "3.11",
    "versions": {"torch": "2.13.0"},
}


def test_ratios_are_paired_per_round() -> None:
    s = summarize("a / b", [1.2, 1.0, 3.0], [1.0, 1.0, 2.0], goal=1.03)
    assert (s.median, s.low, s.high, s.pairs) == (pytest.approx(1.2), 1.0, 1.5, 3)
    assert s.met is False and s.straddles_one is False
    # Rounds that disagree on the faster arm: within the noise.
    assert summarize("x", [0.9, 1.1], [1.0, 1.0]).straddles_one
    # A speedup: the goal is a floor.
    assert RatioSummary("s", 1.8, 1.7, 1.9, 3, goal=1.6, higher_is_better=True).met is True
    with pytest.raises(ValueError, match="same rounds"):
        paired_ratios([1.0, 2.0], [1.0])


def _result(tmp_path: Path, failed: dict[str, str] | None = None) -> dict:
    path = tmp_path / "r.json"
    write_result(
        path,
        name="demo",
        arms={"ours": {"step_s": [0.011, 0.012, 0.010]}, "raw": {"step_s": [0.010, 0.010, 0.010]}},
        ratios=[ratio("ours / raw", "ours", "raw", goal=1.03), ratio("peer / raw", "peer", "raw")],
        memory={"ours": [3 * 2**20, 3 * 2**20], "raw": [4 * 2**20, 4 * 2**20]},
        failed=failed,
        figures={"state ratio": {"value": 0.625, "goal": 0.635, "verdict": "met"}},
    )
    return json.loads(path.read_text())


def test_a_failed_arm_is_reported_as_failed_never_as_a_number(tmp_path: Path) -> None:
    run = BenchRun(
        "demo", "a demo", "ok", 1.0, ["python", "x.py"], result=_result(tmp_path, {"peer": "RuntimeError: boom"})
    )
    ours, peer = run.summaries()
    assert isinstance(ours, RatioSummary) and ours.median == pytest.approx(1.1)
    assert peer == ("peer / raw", "arm 'peer' failed: RuntimeError: boom")
    text = markdown([run], MACHINE, "python -m benchmarks.run", {})
    assert "| demo | peer / raw | failed |" in text and "RuntimeError: boom" in text
    assert "| demo | ours / raw | 1.100 | 1.000 – 1.200 | 3 | ≤ 1.03 | **not met** |" in text  # no round below 1.0
    assert re.search(r"peer / raw\s+failed\s+arm 'peer' failed", terminal_table([run]))


def test_report_json_and_plots_are_written(tmp_path: Path) -> None:
    from matplotlib import image

    ok = BenchRun("demo", "a demo", "ok", 1.0, ["python", "x.py"], result=_result(tmp_path))
    failed = BenchRun("broken", "fails", "failed", 0.5, ["python", "y.py"], error="exit code 1\nValueError: bad")
    skipped = BenchRun("gpu", "needs a GPU", "skipped", error="needs pynvml, not installed here")
    report = write([ok, failed, skipped], MACHINE, "python -m benchmarks.run --quick", tmp_path / "out")
    text = report.read_text()
    assert "test CPU, 2 cores" in text and "torch 2.13.0" in text and "python -m benchmarks.run --quick" in text
    assert "| broken | — | failed |" in text and "ValueError: bad" in text and "| gpu | — | skipped |" in text
    raw = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [b["status"] for b in raw["benchmarks"]] == ["ok", "failed", "skipped"]
    assert raw["benchmarks"][0]["result"]["arms"]["ours"]["step_s"] == [0.011, 0.012, 0.010]  # every round kept
    for png in ("demo_step_times.png", "demo_memory.png"):
        path = tmp_path / "out" / png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.imread(path).shape[0] > 100
        assert f"]({png})" in text


def test_scaling_curves_are_plotted_beside_their_linear_ideal(tmp_path: Path) -> None:
    from matplotlib import image

    from benchmarks.harness.report import plot

    result = _result(tmp_path)
    result["scaling"] = {
        "samples_per_s": {"ddp": {"1": [1000.0, 1100.0], "2": [1800.0, 1900.0]}, "sharded": {"1": [900.0], "2": []}}
    }
    made = plot([BenchRun("scaling", "scales", "ok", 1.0, result=result)], tmp_path)
    assert made["scaling"][-1] == "scaling_scaling.png"
    assert image.imread(tmp_path / "scaling_scaling.png").shape[0] > 100
    # Without scaling figures there is no scaling plot.
    assert (
        "demo_scaling.png"
        not in plot([BenchRun("demo", "a demo", "ok", 1.0, result=_result(tmp_path))], tmp_path)["demo"]
    )


def test_selection_and_bad_names() -> None:
    assert {b.name for b in registry.select(["data"])} == {"preprocess", "starved_gpu"}
    assert [b.name for b in registry.select(None, ["dp"])] == ["dp"]
    assert all("--result" not in " ".join(a) for b in registry.BENCHMARKS for a in b.args.values())
    with pytest.raises(ValueError, match="unknown suite.*choose from"):
        registry.select(["speed"])
    with pytest.raises(ValueError, match="unknown benchmark.*choose from"):
        registry.select(None, ["nope"])
