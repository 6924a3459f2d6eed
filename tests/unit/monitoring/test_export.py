"""``lightning_mgpu.monitoring.export``: the monitor's time line in MLflow, TensorBoard and CSV, read back with each
logger's own reader (``MlflowClient.get_metric_history``, TensorBoard's ``EventAccumulator``, ``csv``), and W&B's
names and rows on a run that records the calls.

The GPU is a fake ``pynvml`` (``tests/helpers/fake_nvml.py``): torch sees ``CUDA_VISIBLE_DEVICES=3,1``, so the
monitor's ``cuda:0`` is NVML's GPU 3, and MLflow's names must say ``gpu_3``. The fits are real, on the CPU, in-process.
"""

from __future__ import annotations

import csv
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_mgpu.callbacks import GPUUtilizationMonitor
from lightning_mgpu.monitoring import callback as gpu_monitor
from lightning_mgpu.monitoring.export import (
    PHASE_CODES,
    DeviceInfo,
    ExportContext,
    TimelineExportConfig,
    csv_devices_path,
    csv_timeline_path,
    destinations,
    open_exports,
    tensorboard_run_dir,
    to_mlflow_values,
    to_wandb_values,
)
from lightning_mgpu.monitoring.timeline import read_timeline, timeline_path
from tests.helpers.fake_nvml import FakeGPU, install_fake_gpus
from tests.helpers.runif import require_or_skip
from tests.helpers.trainer import quiet_trainer

GIB = float(2**30)
#: What the fit's polls set the fake GPU's utilisation to, batch by batch (the first reading, at setup, is 40).
UTILS = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]


@pytest.fixture(scope="module")
def mlflow_store() -> Iterator[None]:
    """MLflow imported, its file store allowed and its telemetry off, once for the module.

    Module-scoped, so it runs before the unit tier's per-test guard against launching processes: importing mlflow
    asks ``platform.platform()``, which runs ``uname -p`` once per interpreter.
    """
    require_or_skip("mlflow")
    with pytest.MonkeyPatch.context() as patch:
        # MLflow 3.7+ keeps its file store behind this switch (sqlite is its default, and needs sqlalchemy).
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        patch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # no network from tests
        platform.platform()
        import mlflow.tracking  # noqa: F401

        original = os.environ.get("MLFLOW_TRACKING_URI")
        try:
            yield
        finally:
            # Lightning's MLFlowLogger calls mlflow.set_tracking_uri, which MLflow 3 also writes into the process's
            # environment: a later test's `train.py --logger mlflow` would inherit this module's store (and refuse it).
            if original is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = original


# --------------------------------------------------------------------------- names, without a fit
def test_mlflow_names_follow_nvml_and_carry_the_rank_where_asked() -> None:
    devices = {"rank1": DeviceInfo("rank1", cuda_index=0, nvml_index=3, power_limit_w=400.0)}
    values = {
        "gpu/rank1/util_pct": 97.0,
        "gpu/rank1/mem_used_gb": 8.0,
        "gpu/rank1/mem_total_gb": 80.0,
        "gpu/rank1/power_w": 100.0,
        "gpu/rank1/sm_clock_mhz": 1410.0,
        "cpu/rank1/util_pct": 50.0,
        "time/rank1/data_wait_pct": 12.5,
    }
    names = to_mlflow_values(values, ExportContext(1, 2, devices), with_rank=True, prefix="timeline")
    assert names == {
        "system/rank1/gpu_3_utilization_percentage": 97.0,
        "system/rank1/gpu_3_memory_usage_megabytes": pytest.approx(8 * GIB / 1e6),
        "system/rank1/gpu_3_memory_usage_percentage": 10.0,
        "system/rank1/gpu_3_power_usage_watts": 100.0,
        "system/rank1/gpu_3_power_usage_percentage": 25.0,
        "timeline/gpu/rank1/sm_clock_mhz": 1410.0,
        "timeline/cpu/rank1/util_pct": 50.0,
        "timeline/time/rank1/data_wait_pct": 12.5,
    }
    # dp: one process, two GPUs, each under its own NVML index; without NVML's index, torch's is the fallback.
    dp = {"rank0_dev0": DeviceInfo("rank0_dev0", 0, 2), "rank0_dev1": DeviceInfo("rank0_dev1", 1, None)}
    named = to_mlflow_values(
        {"gpu/rank0_dev0/util_pct": 1.0, "gpu/rank0_dev1/util_pct": 2.0}, ExportContext(0, 1, dp), False, "tl"
    )
    assert named == {"system/gpu_2_utilization_percentage": 1.0, "system/gpu_1_utilization_percentage": 2.0}


def test_only_loggers_with_a_writer_are_chosen(tmp_path: Path) -> None:
    from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

    class Other(Logger):  # Comet, ...: the window means only
        name, version = "other", 0

        def log_metrics(self, metrics: Any, step: Any = None) -> None: ...

        def log_hyperparams(self, params: Any) -> None: ...

    loggers = [Other(), CSVLogger(tmp_path), TensorBoardLogger(tmp_path)]
    found = destinations(loggers, TimelineExportConfig())
    assert [(d.kind, d.logger_index) for d in found] == [("csv", 1), ("tensorboard", 2)]
    assert [d.kind for d in destinations(loggers, TimelineExportConfig(csv=False))] == ["tensorboard"]

    class Unreachable(CSVLogger):  # a store rank 0 cannot open: the others still get theirs, setup goes on
        @property
        def log_dir(self) -> str:
            raise ConnectionError("store unreachable")

    with pytest.warns(UserWarning, match="does not go to Unreachable .store unreachable"):
        found = destinations([Unreachable(tmp_path), TensorBoardLogger(tmp_path)], TimelineExportConfig())
    assert [(d.kind, d.logger_index) for d in found] == [("tensorboard", 1)]
    with pytest.raises(ValueError, match="mlflow_batch"):
        TimelineExportConfig(mlflow_batch=5000)
    with pytest.raises(ValueError, match="timeline_export"):
        GPUUtilizationMonitor(timeline_export="mlflow")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- one fit, three loggers
def _fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loggers: list[Any], **monitor_kwargs: Any) -> Any:
    """A real CPU fit with the monitor on a fake cuda:0 (NVML's GPU 3): 6 steps, validation after steps 3 and 6,
    a window every 2 steps; one poll per batch, with the GPU's utilisation set to UTILS[batch]."""
    import lightning.pytorch as pl
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    gpus: list[FakeGPU] = install_fake_gpus(monkeypatch)
    # The monitor drives cuda:0 while the model trains on the CPU: only NVML is faked, the fit is real.
    monkeypatch.setattr(gpu_monitor, "local_devices", lambda trainer: [torch.device("cuda", 0)])

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", nn.functional.mse_loss(self.net(batch[0]), batch[1]))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    monitor = GPUUtilizationMonitor(log_every_n_steps=2, sample_interval_s=60, **monitor_kwargs)

    class PollEachBatch(pl.Callback):
        # Before the monitor's own hook (callbacks run in list order): the poll lands in the batch's window.
        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            gpus[3].util = UTILS[batch_idx]
            monitor._sampler.poll()

    data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
    trainer = quiet_trainer(
        max_steps=6,
        val_check_interval=3,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=loggers,
        callbacks=[PollEachBatch(), monitor],
    )
    trainer.fit(Model(), DataLoader(data, batch_size=8), DataLoader(data, batch_size=8))
    return trainer, monitor


def _phases_of_the_file(log_dir: str) -> list[str]:
    return [p["phase"] for p in read_timeline(timeline_path(log_dir, 0)) if p.get("mark")]


@pytest.mark.filterwarnings("ignore:Experiment logs directory")  # the dashboard folder made before the fit
def test_a_fit_writes_its_time_line_into_mlflow_tensorboard_and_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_store: None
) -> None:
    require_or_skip("tensorboard")
    from lightning.pytorch.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    uri = f"file:{tmp_path / 'mlruns'}"
    client = MlflowClient(tracking_uri=uri)
    # The run made here, as a user resuming one would: MLFlowLogger's own run creation reads the git state of the
    # script's folder (a `git` process, which the unit tier refuses).
    run_id = client.create_run(client.create_experiment("timeline")).info.run_id
    csv_logger = CSVLogger(tmp_path, name="csv", version=0)
    # A dashboard page in the run's log folder (as `lightning-mgpu dashboard --serve` keeps one) goes up with the run.
    (Path(csv_logger.log_dir) / "dashboard").mkdir(parents=True)
    (Path(csv_logger.log_dir) / "dashboard" / "index.html").write_text("<html>dashboard</html>")
    mlflow_logger = MLFlowLogger(tracking_uri=uri, run_id=run_id)
    tb_logger = TensorBoardLogger(tmp_path, name="tb", version=0)
    started = time.time()
    trainer, monitor = _fit(tmp_path, monkeypatch, [csv_logger, mlflow_logger, tb_logger])
    ended = time.time()
    assert trainer.log_dir == csv_logger.log_dir
    phases = _phases_of_the_file(trainer.log_dir)
    assert phases == ["train", "validation", "idle", "train", "validation", "idle"]
    verdict = monitor.last_diagnosis[0].verdict

    # ---- MLflow, through its client

    def history(key: str) -> list[Any]:
        return sorted(client.get_metric_history(run_id, key), key=lambda m: (m.timestamp, m.step))

    util = history("system/gpu_3_utilization_percentage")  # NVML's index 3, not torch's 0
    assert [m.value for m in util] == [40.0, *UTILS]  # the setup's poll, then one per batch: every sample
    assert [m.step for m in util] == [0, 0, 1, 2, 3, 4, 5]  # optimizer steps done when it was read
    assert all(started * 1000 - 1 <= m.timestamp <= ended * 1000 + 1 for m in util)  # wall time, in ms
    assert [m.value for m in history("system/gpu_3_memory_usage_megabytes")] == [pytest.approx(3 * GIB / 1e6)] * 7
    assert history("system/gpu_3_memory_usage_percentage")[0].value == pytest.approx(3.75, abs=0.05)
    assert {m.value for m in history("system/gpu_3_power_usage_watts")} == {250.0}
    assert {m.value for m in history("system/gpu_3_power_usage_percentage")} == {50.0}  # of the 500 W limit
    assert {m.value for m in history("timeline/gpu/rank0/sm_clock_mhz")} == {1410.0}
    waits = history("timeline/time/rank0/data_wait_pct")  # one per logging window
    assert len(waits) == 3 and all(0 <= m.value <= 100 for m in waits)
    run = client.get_run(run_id)
    assert not any(k.startswith(("system/rank", "system/gpu_0")) for k in run.data.metrics)  # one rank: no rank
    codes = [m.value for m in history("timeline/phase/rank0")]
    assert {PHASE_CODES["train"], PHASE_CODES["validation"], PHASE_CODES["idle"]} <= set(codes)
    tags = run.data.tags
    assert tags["gpu_monitor.verdict.rank0"] == verdict and tags["gpu_monitor.verdict"] == f"rank0: {verdict}"
    assert tags["gpu_monitor.devices.rank0"].startswith("rank0: cuda:0 = NVML GPU 3 (GPU-00000003-")
    assert tags["gpu_monitor.phase_codes"] == "0=idle 1=train 2=validation 3=checkpoint"
    assert [a.path for a in client.list_artifacts(run_id, "gpu_monitor")] == ["gpu_monitor/diagnosis.json"]
    assert [a.path for a in client.list_artifacts(run_id, "dashboard")] == ["dashboard/index.html"]

    # ---- TensorBoard, through its own reader: rank 0's run under the logger's version folder
    run_dir = tensorboard_run_dir(tb_logger.log_dir, 0)
    assert run_dir == Path(tb_logger.log_dir) / "timeline" / "rank0"
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = events.Scalars("gpu/rank0/util_pct")  # the monitor's own key, beside the logger's window means
    assert [e.value for e in scalars] == [40.0, *UTILS] and [e.step for e in scalars] == [0, 0, 1, 2, 3, 4, 5]
    assert [e.wall_time for e in scalars] == pytest.approx([m.timestamp / 1000 for m in util], abs=1e-3)
    assert {e.value for e in events.Scalars("gpu/rank0/power_w")} == {250.0}
    assert len(events.Scalars("time/rank0/data_wait_pct")) == 3
    texts = [e.tensor_proto.string_val[0].decode() for e in events.Tensors("phase/text_summary")]
    assert texts == phases  # every phase change, in order
    assert "NVML GPU 3" in events.Tensors("devices/text_summary")[0].tensor_proto.string_val[0].decode()
    assert verdict in events.Tensors("diagnosis/text_summary")[0].tensor_proto.string_val[0].decode()
    # The logger's own folder still reads as one run: the time line's events are in a folder of their own.
    assert "val_loss" in EventAccumulator(tb_logger.log_dir).Reload().Tags()["scalars"]

    # ---- CSV, beside metrics.csv
    path = csv_timeline_path(csv_logger.log_dir, 0)
    assert path.parent == Path(csv_logger.log_dir) and (path.parent / "metrics.csv").is_file()
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    samples = [r for r in rows if r["gpu/rank0/util_pct"]]
    assert [float(r["gpu/rank0/util_pct"]) for r in samples] == [40.0, *UTILS]
    assert [r["phase"] for r in rows if r["phase_change"] == "1"] == phases
    assert len([r for r in rows if r["time/rank0/data_wait_pct"]]) == 3
    assert [float(r["time"]) for r in rows] == sorted(float(r["time"]) for r in rows)
    assert {"gpu/rank0/mem_used_gb", "gpu/rank0/power_w", "cpu/rank0/rss_gb"} <= set(rows[0])
    with csv_devices_path(csv_logger.log_dir, 0).open(newline="") as f:
        assert list(csv.DictReader(f)) == [
            {
                "device": "rank0",
                "cuda_index": "0",
                "nvml_index": "3",
                "uuid": "GPU-00000003-aaaa-bbbb-cccc-000000000003",
                "power_limit_w": "500.0",
            }
        ]


def test_timeline_export_off_writes_into_no_logger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_or_skip("tensorboard")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    csv_logger, tb_logger = CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")
    trainer, _ = _fit(tmp_path, monkeypatch, [csv_logger, tb_logger], timeline_export=False)
    assert timeline_path(trainer.log_dir, 0).is_file()  # the monitor's own file is still there
    assert not csv_timeline_path(csv_logger.log_dir, 0).exists()
    assert not tensorboard_run_dir(tb_logger.log_dir, 0).exists()


def test_a_store_that_fails_is_dropped_with_a_warning_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_or_skip("tensorboard")
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    from lightning_mgpu.monitoring.export import CsvTimelineExport

    def full_disk(self: Any, points: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CsvTimelineExport, "write", full_disk)
    csv_logger, tb_logger = CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")
    with pytest.warns(UserWarning, match=r"rank 0\): stopped writing the time line to csv .*No space left") as caught:
        trainer, monitor = _fit(tmp_path, monkeypatch, [csv_logger, tb_logger])
    assert len([w for w in caught if "stopped writing" in str(w.message)]) == 1  # once, then the writer is gone
    assert trainer.global_step == 6 and monitor.last_diagnosis
    assert tensorboard_run_dir(tb_logger.log_dir, 0).is_dir()  # the other logger still got it


@pytest.mark.filterwarnings("ignore:The number of training batches")
def test_with_mlflow_first_the_monitors_files_stay_out_of_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mlflow_store: None
) -> None:
    """Lightning's log_dir is then MLflow's store root (a file store): the monitor's files go to
    <default_root_dir>/gpu_monitor/<run id>, and diagnosis.json into the run as well."""
    from lightning.pytorch.loggers import MLFlowLogger
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlruns"
    client = MlflowClient(tracking_uri=f"file:{store}")
    run_id = client.create_run(client.create_experiment("first")).info.run_id
    monkeypatch.chdir(tmp_path)  # the Trainer's default_root_dir
    trainer, _ = _fit(tmp_path, monkeypatch, [MLFlowLogger(tracking_uri=f"file:{store}", run_id=run_id)])
    files = tmp_path / "gpu_monitor" / run_id
    assert (files / "diagnosis.json").is_file() and timeline_path(files, 0).is_file()
    assert sorted(p.name for p in store.iterdir() if not p.name.startswith(".")) == sorted(
        ["0", client.get_experiment_by_name("first").experiment_id]
    )  # nothing of the monitor's among MLflow's experiments
    assert [a.path for a in client.list_artifacts(run_id, "gpu_monitor")] == ["gpu_monitor/diagnosis.json"]
    assert len(client.get_metric_history(run_id, "system/gpu_3_utilization_percentage")) == 7


# --------------------------------------------------------------------------- W&B, on a run that records its calls
# (a real W&B run starts its `wandb-core` service process, which the unit tier refuses: the real offline run is read
# back in tests/integration/monitoring/test_export.py, from examples/train.py under ddp on fake GPUs)
def test_wandb_names_follow_nvml_and_keep_the_rest_under_the_prefix() -> None:
    devices = {"rank1": DeviceInfo("rank1", cuda_index=0, nvml_index=3, power_limit_w=400.0)}
    values = {
        "gpu/rank1/util_pct": 97.0,
        "gpu/rank1/mem_used_gb": 8.0,
        "gpu/rank1/mem_total_gb": 80.0,
        "gpu/rank1/power_w": 100.0,
        "gpu/rank1/temp_c": 61.0,
        "gpu/rank1/sm_clock_mhz": 1410.0,
        "gpu/rank1/ecc_errors": 0.0,
        "gpu/rank1/energy_j": 12.5,
        "gpu/rank1/util_pct_max": 99.0,
        "cpu/rank1/util_pct": 50.0,
        "time/rank1/data_wait_pct": 12.5,
    }
    assert to_wandb_values(values, ExportContext(1, 2, devices), prefix="timeline") == {
        "gpu.3.gpu": 97.0,
        "gpu.3.memoryAllocatedBytes": 8 * GIB,
        "gpu.3.memoryAllocated": 10.0,
        "gpu.3.powerWatts": 100.0,
        "gpu.3.powerPercent": 25.0,
        "gpu.3.temp": 61.0,
        "gpu.3.smClock": 1410.0,
        "gpu.3.unCorrectedMemoryErrors": 0.0,
        "timeline/gpu/rank1/energy_j": 12.5,
        "timeline/gpu/rank1/util_pct_max": 99.0,
        "timeline/cpu/rank1/util_pct": 50.0,
        "timeline/time/rank1/data_wait_pct": 12.5,
    }
    # dp: two GPUs of one process, each under its NVML index (torch's where NVML does not say); no limit, no percent.
    dp = {"rank0_dev0": DeviceInfo("rank0_dev0", 0, 2), "rank0_dev1": DeviceInfo("rank0_dev1", 1, None)}
    named = to_wandb_values(
        {"gpu/rank0_dev0/util_pct": 1.0, "gpu/rank0_dev1/power_w": 2.0}, ExportContext(0, 1, dp), "tl"
    )
    assert named == {"gpu.2.gpu": 1.0, "gpu.1.powerWatts": 2.0}


class _Settings:
    def __init__(self, mode: str, root_dir: str) -> None:
        self.mode, self.root_dir = mode, root_dir


class RecordingRun:
    """What the exporter calls on a W&B run, recorded (the subset of ``wandb.Run`` it uses)."""

    def __init__(self, mode: str = "offline", group: str = "") -> None:
        self.id, self.project, self.entity, self.group, self.name = "run0", "proj", "team", group, "bright-sun-1"
        self.settings = _Settings(mode, "/tmp/wandb-root")
        self.defined: dict[str, str | None] = {}
        self.rows: list[dict[str, Any]] = []
        self.config: Any = self
        self.config_values: dict[str, Any] = {}
        self.summary: dict[str, Any] = {}
        self.tags: tuple[str, ...] = ("mine",)
        self.saved: list[str] = []
        self.finished = 0

    def define_metric(self, name: str, step_metric: str | None = None, **options: Any) -> None:
        self.defined[name] = step_metric

    def update(self, values: dict[str, Any], allow_val_change: bool = False) -> None:  # run.config.update
        self.config_values.update(values)

    def log(self, row: dict[str, Any], step: int | None = None) -> None:
        assert step is None  # W&B's _step must stay monotonic beside Lightning's rows
        self.rows.append(dict(row))

    def save(self, path: str, base_path: str | None = None, policy: str = "live") -> None:
        self.saved.append(path)

    def finish(self) -> None:
        self.finished += 1


def test_a_wandb_logger_is_chosen_and_says_where_its_run_is(tmp_path: Path) -> None:
    require_or_skip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    from lightning_mgpu.monitoring.export import Destination

    run = RecordingRun(group="sweep-7")
    (found,) = destinations([WandbLogger(experiment=run)], TimelineExportConfig())
    assert found == Destination(
        "wandb",
        0,
        "/tmp/wandb-root",
        "run0",
        (("project", "proj"), ("entity", "team"), ("group", "sweep-7"), ("name", "bright-sun-1"), ("mode", "offline")),
    )
    # No group: the other ranks' runs are grouped under rank 0's run id. A disabled run, or wandb=False: nothing.
    assert dict(destinations([WandbLogger(experiment=RecordingRun())], TimelineExportConfig())[0].options)["group"] == (
        "run0"
    )
    assert destinations([WandbLogger(experiment=RecordingRun(mode="disabled"))], TimelineExportConfig()) == []
    assert destinations([WandbLogger(experiment=run)], TimelineExportConfig(wandb=False)) == []
    # Rank 0 writes into the logger's run, and leaves it open; a rank > 0 opens none with wandb_rank_runs=False.
    context = ExportContext(0, 2, {"rank0": DeviceInfo("rank0", 0, 3)})
    (export,) = open_exports([found], [WandbLogger(experiment=run)], context)
    assert export.run is run and not export.owns_run
    export.close()
    assert run.finished == 0
    rank1 = ExportContext(1, 2, config=TimelineExportConfig(wandb_rank_runs=False))
    assert open_exports([found], [WandbLogger(experiment=run)], rank1) == []
    # pytorch_lightning's WandbLogger, through the bundle's twin for that namespace (lightning_mgpu.pl).
    require_or_skip("pytorch_lightning")
    from lightning_mgpu.pl.monitoring.export import destinations as pl_destinations
    from pytorch_lightning.loggers import WandbLogger as PlWandbLogger

    assert [d.kind for d in pl_destinations([PlWandbLogger(experiment=run)], TimelineExportConfig())] == ["wandb"]


def test_wandb_rows_carry_the_samples_wall_time_phase_and_their_own_x_axis() -> None:
    from lightning_mgpu.monitoring.export import WandbTimelineExport

    run = RecordingRun()
    devices = {"rank0": DeviceInfo("rank0", 0, 3, "GPU-3", 500.0)}
    export = WandbTimelineExport(run, ExportContext(0, 2, devices), owns_run=True)
    assert run.config_values["gpu_monitor/devices/rank0"] == "rank0: cuda:0 = NVML GPU 3 (GPU-3)"
    assert run.config_values["gpu_monitor/phase_codes"] == "0=idle 1=train 2=validation 3=checkpoint"
    export.write(
        [
            {"t": 100.0, "step": 0, "phase": "train", "mark": True, "values": {}},
            {"t": 100.5, "step": 1, "phase": "train", "values": {"gpu/rank0/util_pct": 90.0, "cpu/rank0/rss_gb": 1.0}},
        ]
    )
    export.write([{"t": 101.0, "step": 2, "phase": "validation", "mark": True, "values": {}}])
    assert run.rows == [
        {
            "timeline/step": 0,
            "timeline/phase": PHASE_CODES["train"],
            "timeline/phase_change": "train",
            "timeline/wall_time": 100.0,
            "_timestamp": 100.0,
        },
        {
            "gpu.3.gpu": 90.0,
            "timeline/cpu/rank0/rss_gb": 1.0,
            "timeline/step": 1,
            "timeline/phase": PHASE_CODES["train"],
            "timeline/wall_time": 100.5,
            "_timestamp": 100.5,
        },
        {
            "timeline/step": 2,
            "timeline/phase": PHASE_CODES["validation"],
            "timeline/phase_change": "validation",
            "timeline/wall_time": 101.0,
            "_timestamp": 101.0,
        },
    ]
    # Every key against the samples' wall time, each defined once (a key's own definition beats Lightning's "*").
    assert run.defined == {
        "timeline/wall_time": None,
        "timeline/step": "timeline/wall_time",
        "timeline/phase": "timeline/wall_time",
        "timeline/phase_change": "timeline/wall_time",
        "gpu.3.gpu": "timeline/wall_time",
        "timeline/cpu/rank0/rss_gb": "timeline/wall_time",
    }
    export.finish({"rank0": "input-bound", "rank1": "input-bound"}, {"diagnosis.json": __file__, "dashboard": "/none"})
    assert run.summary == {
        "gpu_monitor/verdict/rank0": "input-bound",
        "gpu_monitor/verdict/rank1": "input-bound",
        "gpu_monitor/verdict": "rank0: input-bound, rank1: input-bound",
    }
    assert run.tags == ("mine", "gpu_monitor: input-bound") and run.saved == [__file__]
    export.close()
    assert run.finished == 1  # a rank's own run ends with the fit


def test_with_a_wandb_logger_without_save_dir_first_the_monitors_files_go_beside_the_runs(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lightning_mgpu.monitoring.export import Destination

    trainer = SimpleNamespace(default_root_dir=str(tmp_path))
    found = [Destination("wandb", 0, "", "abc123")]
    # Lightning's log_dir is the WandbLogger's save_dir: None when it was given none.
    assert GPUUtilizationMonitor._files_dir(trainer, None, found) == str(tmp_path / "gpu_monitor" / "abc123")
    assert GPUUtilizationMonitor._files_dir(trainer, "/logs", found) == "/logs"
