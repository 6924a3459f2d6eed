"""bench_sharded_checkpoint at its dry size: every arm runs (two launched ranks each) and reports its figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_sharded_checkpoint
from tests.helpers.runif import RunIf


@pytest.mark.extended  # the benchmark's own run: before a benchmark session, with --extended
@pytest.mark.timeout(300)
def test_every_arm_saves_loads_and_reports_memory(tmp_path: Path) -> None:
    result = tmp_path / "sharded_checkpoint.json"
    # 512 x 512 layers: large enough that every arm's peak rises above its import baseline (1 MiB a tensor).
    bench_sharded_checkpoint.main(["--rounds", "2", "--width", "512", "--layers", "2", "--result", str(result)])
    out = json.loads(result.read_text())
    assert out["failed"] == {}
    assert set(out["arms"]) == {"sharded", "sharded_async", "full", "raw_dcp", "sharded_fsdp2_trainer"}
    assert all(len(a["save_s"]) == len(a["load_s"]) == 1 for a in out["arms"].values())
    # The background save's two times: what training waits for, and until the folder landed (never less).
    async_arm = out["arms"]["sharded_async"]
    assert len(async_arm["landed_s"]) == 1 and async_arm["landed_s"][0] >= async_arm["save_s"][0] > 0
    assert "sharded async save, until landed / sharded save" in out["figures"]
    assert set(out["memory"]) == set(bench_sharded_checkpoint.ARMS) and all(len(v) == 2 for v in out["memory"].values())
    labels = {r["label"] for r in out["ratios"]}
    assert "sharded save / raw DCP save" in labels
    # The same save through Trainer.save_checkpoint; Lightning's FSDPStrategy is its peer on GPUs only (test below).
    assert "sharded_fsdp2 (Trainer) save / sharded save" in labels
    assert not any("Lightning FSDPStrategy" in label for label in labels)  # no ratio of an arm that did not run
    assert "sharded / ddp peak RSS per rank, build + step + saves" in out["figures"], out["notes"]


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
@pytest.mark.timeout(300)
def test_on_gpus_sharded_fsdp2_and_lightning_fsdp_save_and_load_the_same_model(tmp_path: Path) -> None:
    result = tmp_path / "sharded_checkpoint.json"
    bench_sharded_checkpoint.main(
        ["--accelerator", "gpu", "--rounds", "2", "--width", "512", "--layers", "2", "--result", str(result)]
    )
    out = json.loads(result.read_text())
    assert out["failed"] == {} and set(out["arms"]) == {"sharded_fsdp2_trainer", "lightning_fsdp"}
    labels = {r["label"] for r in out["ratios"]}
    assert "sharded_fsdp2 save / Lightning FSDPStrategy sharded save (Trainer.save_checkpoint, GPU)" in labels
