"""bench_sharded's arms per accelerator (its GPU variant: tests/integration/benchmarks/test_bench_sharded.py)."""

from __future__ import annotations

from benchmarks import bench_sharded


def test_lightning_fsdp_runs_on_gpus_only() -> None:
    # Lightning's FSDPStrategy refuses the CPU; the raw FSDP2 loop is the CPU's peer.
    assert "lightning_fsdp" not in bench_sharded.arms_for("cpu") and "fsdp2" in bench_sharded.arms_for("cpu")
    assert bench_sharded.arms_for("gpu") == [*bench_sharded.ARMS, "lightning_fsdp"]
