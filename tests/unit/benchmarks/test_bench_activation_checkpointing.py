"""bench_activation_checkpointing's rounds, in this process (its CUDA figures: tests/integration/benchmarks/). No timing
is asserted."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_activation_checkpointing as bench


def test_run_reports_each_round_and_no_gpu_figures_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    rows, times = bench.run("mlp", torch.device("cpu"), depth=2, width=16, batch=4, seq=4, repeats=3)
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("round ")] == [
        "round 1/3",
        "round 2/3",
        "round 3/3",
    ]  # the suite's progress bar follows these
    assert {r["config"] for r in rows} == {"none", "every_k=1", "every_k=2", "torch"}
    assert all(r["gpu_busy_share"] is None and r["gpu_kernel_ratio"] is None for r in rows)  # host time is all there is
    assert all(len(t) == 3 for t in times.values())
