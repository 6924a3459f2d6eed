"""GPUUtilizationMonitor: NVML path with a fake ``pynvml``, sync detection, and real multi-rank runs.

The fake NVML stands in for the driver only (there is no GPU here); the gloo runs are real.

The tests that launch processes; the in-process ones are in ``tests/unit/monitoring/test_callback.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from lightning_mgpu.callbacks import GPUUtilizationMonitor
from lightning_mgpu.monitoring.diagnosis import load_diagnoses
from tests.helpers.launch import REPO_ROOT, run, run_python
from tests.helpers.runif import RunIf
from tests.helpers.trainer import quiet_trainer
from tests.unit.monitoring.test_callback import read_metrics  # noqa: F401

RUN = str(REPO_ROOT / "tests" / "integration" / "runners" / "run_gpu_monitor.py")


def assert_keys_for_ranks(rows: list[dict[str, str]], ranks: range, extra: tuple[str, ...] = ()) -> None:
    logged = {k for r in rows for k, v in r.items() if v not in ("", None)}
    for r in ranks:
        for key in (
            f"cpu/rank{r}/util_pct",
            f"cpu/rank{r}/rss_gb",
            f"time/rank{r}/data_wait_pct",
            f"time/rank{r}/step_ms",
            f"throughput/rank{r}/samples_per_sec",
            *(k.format(r=r) for k in extra),
        ):
            assert key in logged, f"{key} missing from metrics.csv; logged: {sorted(logged)}"
    assert "throughput/samples_per_sec" in logged


def test_ddp_two_ranks_logs_both_and_diagnoses_input_vs_compute(tmp_path: Path) -> None:
    run_python([RUN, "--strategy", "ddp", "--devices", "2", "--out", str(tmp_path)], timeout=240)
    result = json.loads((tmp_path / "result.json").read_text())

    input_rows = read_metrics(tmp_path / "input" / "version_0" / "metrics.csv")
    assert_keys_for_ranks(
        input_rows,
        range(2),
        extra=("time/rank{r}/synced_step_ms", "time/rank{r}/unsynced_step_ms", "time/rank{r}/comm_pct"),
    )
    assert sorted({int(r["step"]) for r in input_rows}) == [1, 3, 5, 7]  # Lightning's axis (accumulate_grad_batches=2)
    total = [float(r["throughput/samples_per_sec"]) for r in input_rows]
    per_rank = [
        float(r["throughput/rank0/samples_per_sec"]) + float(r["throughput/rank1/samples_per_sec"]) for r in input_rows
    ]
    assert total == pytest.approx(per_rank, rel=1e-5)
    assert result["input"]["verdicts"] == {"rank0": "input-bound", "rank1": "input-bound"}

    compute_rows = read_metrics(tmp_path / "compute" / "version_0" / "metrics.csv")
    assert_keys_for_ranks(compute_rows, range(2))
    assert result["compute"]["verdicts"] == {"rank0": "compute-bound", "rank1": "compute-bound"}

    diagnoses, meta = load_diagnoses(result["input"]["diagnosis_path"])
    assert {d.device: d.verdict for d in diagnoses} == result["input"]["verdicts"]
    assert all(d.evidence["data_wait_pct"] > 50 for d in diagnoses)
    assert any("num_workers" in a for a in diagnoses[0].advice)
    assert meta["context"]["world_size"] == 2 and meta["context"]["num_workers"] == 0


@pytest.mark.parametrize(
    "strategy",
    [
        # Lightning's spawn launcher, and FairScale's gather (Lightning's all_gather through the strategy, as ddp's
        # above): the extended tier's. horovod gathers by its own collectives.
        pytest.param("ddp_spawn", marks=pytest.mark.extended),
        pytest.param("sharded", marks=pytest.mark.extended),
        pytest.param("horovod", marks=pytest.mark.horovod),
    ],
)
def test_other_strategies_gather_every_rank(strategy: str, tmp_path: Path) -> None:
    args = [RUN, "--strategy", strategy, "--out", str(tmp_path), "--scenarios", "input", "--max-steps", "4"]
    if strategy == "horovod":
        # No skip when horovodrun is missing: CI installs horovod, and a broken install must fail here.
        horovodrun = str(Path(sys.executable).with_name("horovodrun"))
        run([horovodrun, "-np", "2", "--gloo", sys.executable, *args, "--devices", "1"], timeout=240)
    else:
        run_python([*args, "--devices", "2"], timeout=240)
    rows = read_metrics(tmp_path / "input" / "version_0" / "metrics.csv")
    assert_keys_for_ranks(rows, range(2))
    diagnoses, _ = load_diagnoses(tmp_path / "input" / "version_0" / "diagnosis.json")
    assert {d.device: d.verdict for d in diagnoses} == {"rank0": "input-bound", "rank1": "input-bound"}


@RunIf(neptune=True)
def test_the_time_line_of_a_fit_has_its_phases_and_reaches_a_neptune_run(tmp_path: Path) -> None:
    """In-process fit with validation: rank 0's time line file holds samples in train and validation phases and a
    checkpoint save, and the bundle's NeptuneLogger gets the same series."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_mgpu.loggers import NeptuneLogger
    from lightning_mgpu.monitoring.timeline import read_timeline, timeline_path

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(64, 1)

        def training_step(self, batch, batch_idx):
            x = batch[0]
            for _ in range(200):  # some work per step, so that samples land inside steps
                x = torch.tanh(x @ torch.eye(64))
            return nn.functional.mse_loss(self.net(x), batch[1])

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    neptune = NeptuneLogger(
        mode="debug", capture_hardware_metrics=False, capture_stdout=False, capture_stderr=False, git_ref=False
    )
    monitor = GPUUtilizationMonitor(log_every_n_steps=5, sample_interval_s=0.005)
    data = DataLoader(TensorDataset(torch.randn(512, 64), torch.randn(512, 1)), batch_size=16)
    trainer = quiet_trainer(
        max_epochs=2,
        limit_val_batches=8,
        logger=[CSVLogger(tmp_path), neptune],
        callbacks=[monitor],
        enable_checkpointing=True,
        default_root_dir=tmp_path,
    )
    try:
        trainer.fit(Model(), data, data)
        points = read_timeline(timeline_path(trainer.log_dir, 0))
        phases = {p["phase"] for p in points}
        assert {"train", "validation", "checkpoint", "idle"} <= phases, phases
        # The background polls (cpu/..., gpu/...), and the batches' timing (data-wait share, step time, samples/s)
        # once per sample interval: here shorter than a step, so at most one per step, and at every window's end.
        sampled = [p for p in points if any(k.startswith(("cpu/", "gpu/")) for k in p["values"])]
        timed = [p for p in points if "time/rank0/data_wait_pct" in p["values"]]
        assert len(sampled) >= 20 and all(
            "cpu/rank0/util_pct" in p["values"] or "cpu/rank0/rss_gb" in p["values"] for p in sampled
        )
        steps = [p["step"] for p in timed]
        assert steps == sorted(set(steps)) and 13 < len(timed) <= 64, steps  # 2 x 32 steps
        assert {*range(5, 64, 5), 64} <= set(steps)  # a window every 5 steps, and one for the last 4
        assert [p for p in points if p["values"]] == sorted(sampled + timed, key=lambda p: p["t"])
        assert [p["t"] for p in points] == sorted(p["t"] for p in points)
        assert points[-1]["phase"] == "idle" and points[-1].get("mark")  # after the last batch
        run = neptune.experiment
        run.wait()
        util = run["monitoring/timeline/cpu/rank0/util_pct"].fetch_values()
        written = [p["values"]["cpu/rank0/util_pct"] for p in sampled if "cpu/rank0/util_pct" in p["values"]]
        assert len(util) > 0 and list(util["value"])[: len(written)] == pytest.approx(written[: len(util)])
        assert set(run["monitoring/timeline/phase"].fetch_values()["value"]) >= {"train", "validation"}
    finally:
        neptune.stop()
