"""bench_activation_checkpointing's rounds and its CUDA-only GPU busy-time figures. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import bench_activation_checkpointing as bench
from tests.helpers.launch import REPO_ROOT, run_python
from tests.helpers.runif import RunIf

SCRIPT = str(REPO_ROOT / "benchmarks" / "bench_activation_checkpointing.py")


def test_run_reports_each_round_and_no_gpu_figures_on_cpu() -> None:
    rounds: list[int] = []
    rows, times = bench.run("mlp", torch.device("cpu"), depth=2, width=16, batch=4, seq=4, repeats=3, on_round=lambda: rounds.append(1))
    assert len(rounds) == 3  # the suite's progress bar follows these
    assert {r["config"] for r in rows} == {"none", "every_k=1", "every_k=2", "torch"}
    assert all(r["gpu_busy_share"] is None and r["gpu_kernel_ratio"] is None for r in rows)  # host time is all there is
    assert all(len(t) == 3 for t in times.values())


@RunIf(min_cuda_gpus=1)
@pytest.mark.timeout(300)
def test_cuda_figures_give_the_gpu_busy_share_and_kernel_time(tmp_path: Path) -> None:
    result = tmp_path / "ac.json"
    run_python([SCRIPT, "--device", "cuda", "--model", "transformer", "--depth", "2", "--repeats", "2", "--result", str(result)], timeout=280)
    figures = json.loads(result.read_text())["figures"]
    for config in ("none", "every_k=1", "torch"):
        share = figures[f"transformer-cuda: {config}, GPU busy share of the step (kernel time / step time)"]["value"]
        assert 0.0 < share <= 1.2  # kernel time cannot exceed the step by more than the profiler's rounding
    # Checkpointing recomputes every block's forward: the GPU runs more kernel time than without it.
    assert figures["transformer-cuda: every_k=1 / no checkpointing, GPU kernel time (one step each)"]["value"] > 1.0
