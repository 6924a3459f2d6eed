"""bench_sharded_checkpoint at its dry size: every arm runs (two launched ranks each) and reports its figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_sharded_checkpoint


@pytest.mark.timeout(300)
def test_every_arm_saves_loads_and_reports_memory(tmp_path: Path) -> None:
    result = tmp_path / "sharded_checkpoint.json"
    # 512 x 512 layers: large enough that every arm's peak rises above its import baseline (1 MiB a tensor).
    bench_sharded_checkpoint.main(["--rounds", "2", "--width", "512", "--layers", "2", "--result", str(result)])
    out = json.loads(result.read_text())
    assert out["failed"] == {}
    assert set(out["arms"]) == {"sharded", "sharded_async", "full", "raw_dcp"} and all(len(a["save_s"]) == len(a["load_s"]) == 1 for a in out["arms"].values())
    # The background save's two times: what training waits for, and until the folder landed (never less).
    async_arm = out["arms"]["sharded_async"]
    assert len(async_arm["landed_s"]) == 1 and async_arm["landed_s"][0] >= async_arm["save_s"][0] > 0
    assert "sharded async save, until landed / sharded save" in out["figures"]
    assert set(out["memory"]) == set(bench_sharded_checkpoint.ARMS) and all(len(v) == 2 for v in out["memory"].values())
    assert {r["label"] for r in out["ratios"]} >= {"sharded save / raw DCP save"}
    assert "sharded / ddp peak RSS per rank, build + step + saves" in out["figures"], out["notes"]
