"""bench_scaling: its checks before any launch, a failing launch reported as failed, and its GPU variant on two real
GPUs.

The in-process tests; the ones that launch processes are in ``tests/integration/benchmarks/test_bench_scaling.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_scaling


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--counts", "2,4"], "the counts must start at 1"),
        (["--strategies", "ddp,fsdp"], "unknown strategies ['fsdp']"),
        (["--strategies", "dp"], "dp drives several GPUs from one process"),
    ],
)
def test_bad_input_is_refused_before_any_launch(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        bench_scaling.main(argv)


def test_default_counts_on_cpu_are_one_and_two_processes() -> None:
    assert bench_scaling.default_counts("cpu") == [1, 2]


def test_a_strategy_that_cannot_run_keeps_its_ratios_as_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = bench_scaling.importlib.util.find_spec
    monkeypatch.setattr(
        bench_scaling.importlib.util, "find_spec", lambda name, *a: None if name == "fairscale" else real(name, *a)
    )
    result = tmp_path / "scaling.json"
    bench_scaling.main(["--rounds", "1", "--strategies", "sharded", "--result", str(result)])  # nothing to launch
    out = json.loads(result.read_text())
    assert out["arms"] == {} and set(out["failed"]) == {"sharded@1", "sharded@2"}
    assert "needs fairscale" in out["failed"]["sharded@2"]
    # The report shows the ratio as failed, with the error, rather than dropping it.
    assert [r["label"] for r in out["ratios"]] == ["sharded: scaling efficiency at 2 devices (step at 1 / step at 2)"]
