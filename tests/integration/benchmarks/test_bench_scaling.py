"""bench_scaling: its checks before any launch, a failing launch reported as failed, and its GPU variant on two real
GPUs.

The tests that launch processes; the in-process ones are in ``tests/unit/benchmarks/test_bench_scaling.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_scaling
from tests.helpers.runif import RunIf


@pytest.mark.timeout(180)
def test_a_rank_that_fails_is_reported_with_its_error(tmp_path: Path) -> None:
    result = tmp_path / "scaling.json"
    # batch size 0: the DataLoader refuses it inside the launched rank, after Lightning started.
    bench_scaling.main(
        [
            "--rounds",
            "1",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--hidden",
            "16",
            "--strategies",
            "ddp",
            "--counts",
            "1",
            "--batch-size",
            "0",
            "--launch-timeout",
            "150",
            "--result",
            str(result),
        ]
    )
    out = json.loads(result.read_text())
    assert set(out["failed"]) == {"ddp@1"} and out["arms"] == {}
    assert "rank 0 exited with 1" in out["failed"]["ddp@1"] and "batch_size" in out["failed"]["ddp@1"]


@RunIf(min_cuda_gpus=2, fairscale=True)
@pytest.mark.timeout(600)
def test_gpu_variant_scales_every_strategy_over_real_gpus(tmp_path: Path) -> None:
    result = tmp_path / "scaling.json"
    bench_scaling.main(
        [
            "--accelerator",
            "gpu",
            "--counts",
            "1,2",
            "--rounds",
            "1",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--hidden",
            "256",
            "--result",
            str(result),
        ]
    )
    out = json.loads(result.read_text())
    assert not out["failed"] and set(out["arms"]) == {f"{s}@{n}" for s in ("ddp", "sharded", "dp") for n in (1, 2)}
    for strategy in ("ddp", "sharded", "dp"):
        assert set(out["scaling"]["samples_per_s"][strategy]) == {"1", "2"}
