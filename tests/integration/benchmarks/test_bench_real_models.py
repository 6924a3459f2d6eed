"""bench_real_models at its dry size on the CPU: every arm fits, each Lightning arm is paired with its peers, and
nothing claims an MFU without a known peak. In its own process: the arms start process groups and horovod."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_real_models import ARMS, PEERS
from benchmarks.harness.registry import BENCHMARKS
from lightning_mgpu.utilities.imports import is_available
from tests.helpers.launch import run_python


@pytest.mark.extended  # the benchmark's own run: before a benchmark session, with --extended
@pytest.mark.timeout(300)
def test_every_arm_trains_both_models_and_is_paired_with_its_peers(tmp_path: Path) -> None:
    result = tmp_path / "real_models.json"
    dry = next(b for b in BENCHMARKS if b.name == "real_models").args["dry"]  # the suite's own dry size
    run_python(["-m", "benchmarks.bench_real_models", *dry, "--result", str(result)], timeout=240)
    out = json.loads(result.read_text())
    ran = [a for a in ARMS if a != "horovod" or is_available("horovod")]
    models = ("ResNet(1, 1)x8", "GPT 2x32")
    assert out["failed"] == ({} if is_available("horovod") else {"horovod": out["failed"]["horovod"]})
    assert set(out["arms"]) == {f"{m}: {a}" for m in models for a in ran}
    labels = {r["label"] for r in out["ratios"]}
    expected = {f"{m}: {a} / {p} step time" for m in models for a, peers in PEERS.items() if a in ran for p in peers}
    assert labels == expected
    assert all(r["goal"] == 1.03 for r in out["ratios"])
    # The CPU has no known peak: samples/s for every arm, MFU for none.
    assert {k for k in out["figures"] if k.endswith("samples/s")} == {
        f"{m}: {a}: samples/s" for m in models for a in ran
    }
    assert not any("MFU" in k for k in out["figures"]) and out["config"]["peak_flops_bf16_dense"] is None
    assert out["config"]["flops_per_step"]["GPT 2x32"] > 0
