"""bench_sharded's GPU variant on two real GPUs (skipped without them): its ranks are launched processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_sharded
from tests.helpers.runif import RunIf


@RunIf(min_cuda_gpus=2, fairscale=True)
@pytest.mark.timeout(600)
def test_gpu_variant_compares_sharded_with_lightning_fsdp(tmp_path: Path) -> None:
    result = tmp_path / "sharded.json"
    bench_sharded.main(
        [
            "--accelerator",
            "gpu",
            "--rounds",
            "1",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--hidden",
            "256",
            "--result",
            str(result),
        ]
    )
    out = json.loads(result.read_text())
    assert set(out["arms"]) == set(bench_sharded.arms_for("gpu")) and not out["failed"]
    assert "sharded / Lightning FSDPStrategy(SHARD_GRAD_OP)" in [r["label"] for r in out["ratios"]]
    # Both shard the optimizer state and the gradients: well under ddp's model state.
    assert out["figures"]["Lightning FSDPStrategy(SHARD_GRAD_OP) / ddp model state per rank"]["value"] < 0.8
    assert out["memory"]["lightning_fsdp"] and all(b > 0 for b in out["memory"]["lightning_fsdp"])
