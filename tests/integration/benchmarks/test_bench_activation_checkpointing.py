"""bench_activation_checkpointing's CUDA-only GPU busy-time figures, from the script run as a user runs it. No timing is
asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launch import run_python
from tests.helpers.runif import RunIf

SCRIPT = ["-m", "benchmarks.bench_activation_checkpointing"]


@RunIf(min_cuda_gpus=1)
@pytest.mark.timeout(300)
def test_cuda_figures_give_the_gpu_busy_share_and_kernel_time(tmp_path: Path) -> None:
    result = tmp_path / "ac.json"
    run_python(
        [
            *SCRIPT,
            "--device",
            "cuda",
            "--model",
            "transformer",
            "--depth",
            "2",
            "--repeats",
            "2",
            "--result",
            str(result),
        ],
        timeout=280,
    )
    figures = json.loads(result.read_text())["figures"]
    for config in ("none", "every_k=1", "torch"):
        share = figures[f"transformer-cuda: {config}, GPU busy share of the step (kernel time / step time)"]["value"]
        assert 0.0 < share <= 1.2  # kernel time cannot exceed the step by more than the profiler's rounding
    # Checkpointing recomputes every block's forward: the GPU runs more kernel time than without it.
    assert figures["transformer-cuda: every_k=1 / no checkpointing, GPU kernel time (one step each)"]["value"] > 1.0
