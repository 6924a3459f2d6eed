"""``python -m benchmarks.run`` end to end, on real benchmark processes at their dry-run size (timings are not checked).

The in-process tests; the ones that launch processes are in ``tests/integration/benchmarks/test_run.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import run


def test_skip_reasons_name_what_is_missing() -> None:
    by_name = {b.name: b for b in run.BENCHMARKS}
    assert run.skip_reason(by_name["ddp"], "full", gpu=True, gpus=1) == "its GPU variant needs 2 GPUs, 1 here"
    assert run.skip_reason(by_name["ddp"], "full", gpu=True, gpus=2) is None
    assert run.skip_reason(by_name["dp"], "full", gpu=True, gpus=1) is None
    assert run.skip_reason(by_name["parity"], "full", gpu=True, gpus=8) == "no GPU variant"
    assert run.skip_reason(by_name["amp"], "full", gpu=False, gpus=0).startswith("GPU only")
    assert run.skip_reason(by_name["amp"], "dry", gpu=False, gpus=0) is None  # the dry size tests its script on the CPU
    assert run.skip_reason(by_name["amp"], "quick", gpu=True, gpus=1) is None


def test_a_run_stopped_part_way_keeps_the_benchmarks_that_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    def run_one(bench: Any, *args: Any, **kwargs: Any) -> Any:
        if bench.name == "parity":
            raise KeyboardInterrupt  # the job killed during its second benchmark
        return run.reporting.BenchRun(
            bench.name, bench.what, "failed", 1.0, ["python", "x"], error="stood in for a real run"
        )

    monkeypatch.setattr(run, "run_one", run_one)
    with pytest.raises(KeyboardInterrupt):
        run.main(["--dry-run", "--only", "ddp,parity,dp", "--out", str(tmp_path)])
    runs, _, command = run.reporting.read(tmp_path)
    assert [r.name for r in runs] == ["ddp"] and command.endswith("(in progress: 1 of 3 benchmarks done)")
    assert "## ddp" in (tmp_path / "report.md").read_text()


def test_update_refuses_another_machine_other_versions_or_run_size() -> None:
    here = {"cpu": "AMD EPYC", "cores": 2, "gpus": [], "versions": {"torch": "2.13.0"}}
    assert run.update_refusal(here, "python -m benchmarks.run --out x", dict(here), "full") is None
    assert "cores" in run.update_refusal(here, "python -m benchmarks.run", {**here, "cores": 16}, "full")
    assert "versions" in run.update_refusal(
        here, "python -m benchmarks.run", {**here, "versions": {"torch": "2.15.0"}}, "full"
    )
    assert "a quick run and this one is full" in run.update_refusal(
        here, "python -m benchmarks.run --quick", dict(here), "full"
    )
    # An updated report's command quotes its parts; its first run sets the size.
    first_quick = (
        "`python -m benchmarks.run --quick`; then, on 2026-11-26,"
        " `python -m benchmarks.run --quick --only dp --update x`"
    )
    assert run.update_refusal(here, first_quick, dict(here), "quick") is None
    assert "ran the GPU variants (--gpu) and this run does not" in run.update_refusal(
        here, "python -m benchmarks.run --gpu", dict(here), "full"
    )


def test_merge_keeps_the_registry_order_and_replaces_by_name() -> None:
    old = [run.reporting.BenchRun(n, "", "ok", 1.0) for n in ("ddp", "dp", "preprocess")]  # no `what`: an old report
    new = [
        run.reporting.BenchRun("preprocess", "", "failed", 2.0),
        run.reporting.BenchRun("ddp", "", "ok", 3.0),
        run.reporting.BenchRun("sharded", "", "ok", 4.0),
    ]
    merged = run.merge_runs(old, new)
    assert [(r.name, r.status, r.seconds) for r in merged] == [
        ("ddp", "ok", 3.0),
        ("sharded", "ok", 4.0),
        ("dp", "ok", 1.0),
        ("preprocess", "failed", 2.0),
    ]
    assert merged[2].what.startswith("dp on one device")  # the registry's description, for the section's heading
