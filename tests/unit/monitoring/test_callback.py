"""GPUUtilizationMonitor: NVML path with a fake ``pynvml``, sync detection, and real multi-rank runs.

The fake NVML stands in for the driver only (there is no GPU here); the gloo runs are real.

The in-process tests; the ones that launch processes are in ``tests/integration/monitoring/test_callback.py``.
"""

from __future__ import annotations

import csv
import logging
import os
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lightning_mgpu.callbacks import GPUUtilizationMonitor
from lightning_mgpu.monitoring import callback as gpu_monitor
from lightning_mgpu.monitoring.callback import local_devices, local_labels
from lightning_mgpu.monitoring.diagnosis import load_diagnoses
from lightning_mgpu.monitoring.samplers import (
    BackgroundSampler,
    NvmlSource,
    match_nvml_handles,
)
from lightning_mgpu.monitoring.step_timing import SYNC_WARNING, StepTimer, SyncDetector
from tests.helpers.fake_nvml import FakeGPU, install_fake_gpus
from tests.helpers.runif import RunIf, require_or_skip
from tests.helpers.trainer import quiet_trainer


# --------------------------------------------------------------------------- fake NVML
@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeGPU]:
    """Four GPUs in NVML (PCI) order; torch sees only CUDA_VISIBLE_DEVICES=3,1 (in that order)."""
    return install_fake_gpus(monkeypatch)


def test_uuid_matching_follows_cuda_visible_devices(fake_gpus: list[FakeGPU]) -> None:
    nvml = sys.modules["pynvml"]
    handles = match_nvml_handles(nvml, [0, 1])
    # cuda:0 is physical GPU 3 and cuda:1 physical GPU 1; matching by index would give 0 and 1.
    assert handles[0] is fake_gpus[3]
    assert handles[1] is fake_gpus[1]


def test_uuid_without_match_is_skipped_not_guessed(fake_gpus: list[FakeGPU], monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = sys.modules["pynvml"]
    with pytest.warns(UserWarning, match="no NVML device has the UUID of cuda:0"):
        handles = match_nvml_handles(nvml, [0], uuid_of=lambda i: "MIG-ffffffff-0000-0000-0000-000000000000")
    assert handles == {}


def test_nvml_window_mean_uses_buffered_samples(fake_gpus: list[FakeGPU]) -> None:
    nvml, gpu = sys.modules["pynvml"], fake_gpus[2]
    gpu.samples[1] = [(100, 99.0)]  # in the buffer before training: must not count
    sampler = BackgroundSampler([NvmlSource("rank0", nvml, gpu)], interval_s=60)  # the test polls by hand
    sampler.poll()
    sampler.collect()
    # The driver took 4 samples between two polls; the instantaneous reading would say 30.
    gpu.samples[1] += [(200, 10.0), (300, 20.0), (400, 60.0), (500, 70.0)]
    gpu.samples[0] += [(250, 100_000.0), (450, 300_000.0)]  # mW
    gpu.samples[5] += [(260, 1000.0), (460, 1500.0)]
    sampler.poll()
    window = sampler.collect()["rank0"]
    assert window["util_pct"].mean == pytest.approx(40.0)
    assert (window["util_pct"].min, window["util_pct"].max) == (10.0, 70.0)
    assert window["power_w"].mean == pytest.approx(200.0)
    assert window["sm_clock_mhz"].mean == pytest.approx(1250.0)
    assert window["mem_used_gb"].max == pytest.approx(3.0)
    assert window["mem_total_gb"].last == pytest.approx(80.0)

    # A window without a poll (shorter than the poll interval): carry the last value forward.
    assert sampler.collect()["rank0"]["util_pct"].mean == pytest.approx(70.0)
    # A poll without a new driver sample: the current value.
    sampler.poll()
    assert sampler.collect()["rank0"]["util_pct"].mean == pytest.approx(30.0)

    # A board without a sample buffer: poll the instantaneous value instead.
    gpu.buffered, gpu.util = False, 55.0
    sampler.poll()
    assert sampler.collect()["rank0"]["util_pct"].mean == pytest.approx(55.0)


def test_temperature_energy_pcie_throttling_and_ecc_where_nvml_has_them(fake_gpus: list[FakeGPU]) -> None:
    nvml, gpu = sys.modules["pynvml"], fake_gpus[0]
    sampler = BackgroundSampler([NvmlSource("rank0", nvml, gpu)], interval_s=60)  # the test polls by hand
    sampler.poll()  # the energy counter's first reading: nothing used yet
    assert "energy_j" not in sampler.collect()["rank0"]
    gpu.temp_c, gpu.energy_mj, gpu.reasons = 71, 1_150_000, 0x4  # 150 J later, capped by power
    sampler.poll()
    gpu.temp_c, gpu.energy_mj, gpu.reasons = 83, 1_250_000, 0x1 | 0x40  # idle bit (not a slowdown), hardware thermal
    sampler.poll()
    gpu.energy_mj, gpu.reasons, gpu.ecc_errors = 1_300_000, 0, 2
    sampler.poll()
    window = sampler.collect()["rank0"]
    assert (window["temp_c"].max, window["energy_j"].total) == (83.0, pytest.approx(300.0))
    assert (window["pcie_tx_mb_s"].mean, window["pcie_rx_mb_s"].mean) == (2.0, 1.0)
    # PCIe is read once per pcie_every_s (each NVML call counts bytes over 20 ms): at the first of these quick polls
    # only; this window's 3 polls read none, and the window carries the last reading forward.
    assert window["pcie_tx_mb_s"].count == 1 and window["temp_c"].count == 3
    every_poll = BackgroundSampler([NvmlSource("rank0", nvml, gpu, pcie_every_s=0)], interval_s=60)
    for _ in range(3):
        every_poll.poll()
    assert every_poll.collect()["rank0"]["pcie_rx_mb_s"].count == 3
    assert window["throttle_power_pct"].mean == pytest.approx(100 / 3)
    assert window["throttle_thermal_pct"].mean == pytest.approx(100 / 3)
    assert window["throttle_hw_slowdown_pct"].mean == 0.0 and window["ecc_errors"].last == 2.0

    # A board without a query: that reading is left out from then on, the others go on.
    older = fake_gpus[1]
    older.unsupported = {"temp", "reasons", "energy"}
    source = NvmlSource("rank0", nvml, older)
    read = {name for name, _ in source.read()}
    assert {"temp_c", "throttle_power_pct", "energy_j"}.isdisjoint(read) and {"pcie_tx_mb_s", "ecc_errors"} <= read
    older.unsupported = set()
    assert "temp_c" not in {name for name, _ in source.read()}  # never asked again
    # Any other NVML error is raised, not hidden.
    broken = FakeGPU("ffffffff-aaaa-bbbb-cccc-000000000000", util=1.0)
    source = NvmlSource("rank0", nvml, broken)
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: (_ for _ in ()).throw(nvml.NVMLError(999))
    with pytest.raises(nvml.NVMLError):
        source.read()


# --------------------------------------------------------------------------- dp labelling (unit level)
class RecordingLogger:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.rows.append((step, dict(metrics)))


def fake_dp_trainer(tmp_path: Path, logger: RecordingLogger) -> SimpleNamespace:
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    strategy = SimpleNamespace(root_device=devices[0], parallel_devices=devices, strategy_name="dp")
    return SimpleNamespace(
        strategy=strategy,
        world_size=1,
        global_rank=0,
        is_global_zero=True,
        global_step=0,
        log_every_n_steps=50,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(_batches_that_stepped=0)),
        loggers=[logger],
        log_dir=str(tmp_path),
        precision="32-true",
        accumulate_grad_batches=1,
        train_dataloader=None,
    )


def test_dp_logs_every_device_of_its_process(
    fake_gpus: list[FakeGPU], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    logger = RecordingLogger()
    trainer = fake_dp_trainer(tmp_path, logger)
    assert local_labels(0, local_devices(trainer)) == ["rank0_dev0", "rank0_dev1"]

    ticks = [0.0, 0.002, 0.102]  # epoch start, batch arrives, batch ends; then the clock stands at 0.2
    monkeypatch.setattr(gpu_monitor, "_now", lambda: ticks.pop(0) if ticks else 0.2)
    monitor = GPUUtilizationMonitor(log_every_n_steps=1, sample_interval_s=60, detect_sync=True)
    module = SimpleNamespace()
    showwarning, filters = warnings.showwarning, list(warnings.filters)
    monitor.setup(trainer, module, "fit")
    try:
        fake_gpus[3].samples[1] += [(10**9, 95.0), (10**9 + 1, 85.0)]  # cuda:0 busy
        fake_gpus[1].samples[1] += [(10**9, 15.0), (10**9 + 1, 25.0)]  # cuda:1 idle
        monitor.on_train_epoch_start(trainer, module)  # t = 0
        batch = (torch.zeros(64, 3), torch.zeros(64))
        monitor.on_train_batch_start(trainer, module, batch, 0)  # t = 2 ms: 2 ms waiting for data
        warnings.warn(SYNC_WARNING, UserWarning)  # what `loss.item()` in training_step triggers under sync debug mode
        monitor.on_before_optimizer_step(trainer, module, None)
        trainer.global_step = 1
        monitor._sampler.poll()
        monitor.on_train_batch_end(trainer, module, None, batch, 0)  # t = 102 ms: a 100 ms step
        monitor.on_train_end(trainer, module)
    finally:
        monitor.teardown(trainer, module, "fit")

    step, metrics = logger.rows[0]
    assert step == 0  # Lightning's axis: its count of batches that stepped goes up after on_train_batch_end
    assert metrics["time/rank0_dev0/data_wait_ms"] == pytest.approx(2.0) and metrics[
        "time/rank0_dev0/step_ms"
    ] == pytest.approx(100.0)
    assert metrics["throughput/samples_per_sec"] == pytest.approx(64 / 0.102)
    assert metrics["gpu/rank0_dev0/util_pct"] == pytest.approx(90.0)  # physical GPU 3, not NVML index 0
    assert metrics["gpu/rank0_dev1/util_pct"] == pytest.approx(20.0)
    assert metrics["gpu/rank0_dev1/util_pct_min"] == 15.0 and metrics["gpu/rank0_dev1/util_pct_max"] == 25.0
    assert metrics["gpu/rank0_dev0/power_w"] == pytest.approx(250.0) and metrics["gpu/rank0_dev0/sm_clock_mhz"] == 1410
    for dev in ("rank0_dev0", "rank0_dev1"):
        assert f"time/{dev}/data_wait_pct" in metrics and f"cpu/{dev}/rss_gb" in metrics
        assert metrics[f"time/{dev}/host_syncs_per_step"] == 1.0
    # One process loads the batch of both devices: each device gets half the samples.
    assert metrics["throughput/rank0_dev0/samples_per_sec"] == pytest.approx(metrics["throughput/samples_per_sec"] / 2)
    assert not any(k.startswith(("gpu/rank0/", "gpu/rank1/")) for k in metrics)

    verdicts = {d.device: d.verdict for d in monitor.last_diagnosis}
    assert verdicts == {"rank0_dev0": "compute-bound", "rank0_dev1": "low-utilisation-unexplained"}
    advice = " ".join(next(d for d in monitor.last_diagnosis if d.device == "rank0_dev1").advice)
    assert "strategy='ddp' instead of 'dp'" in advice and "host-device syncs" in advice
    diagnoses, meta = load_diagnoses(tmp_path / "diagnosis.json")
    assert [d.device for d in diagnoses] == ["rank0_dev0", "rank0_dev1"]
    assert meta["scope"] == "fit" and meta["context"]["strategy"] == "dp"
    assert "test_callback.py" in meta["sync_sites"][0][0] and "warnings.warn(SYNC_WARNING" in meta["sync_sites"][0][0]
    assert modes == [1, 0]  # warn mode during the step only
    assert sys.modules["pynvml"].calls == {"init": 1, "shutdown": 1}
    assert monitor._sampler is None and monitor._detector is None
    assert warnings.showwarning is showwarning and warnings.filters == filters  # teardown restored both


# --------------------------------------------------------------------------- timing and sync detection
def test_step_timer_splits_wait_and_step_and_drops_gaps() -> None:
    t = StepTimer()
    t.restart(0.0)
    t.batch_start(0.030)  # 30 ms waiting for the first batch
    t.batch_end(0.040, samples=8, synced=False)
    t.batch_start(0.050)
    t.batch_end(0.080, samples=8, synced=True)
    t.mark_gap()  # a checkpoint is written before the next batch: that interval is dropped
    t.batch_start(0.500)
    t.batch_end(0.510, samples=8, synced=True)
    t.pause()  # validation
    t.restart(1.0)
    t.batch_start(1.002)
    t.batch_end(1.012, samples=8, synced=True)
    acc = t.take()
    assert acc.batches == 3 and acc.samples == 24
    assert acc.wait_s == pytest.approx(0.030 + 0.010 + 0.002)
    assert acc.step_s == pytest.approx(0.010 + 0.030 + 0.010)
    assert (acc.synced_n, acc.unsynced_n) == (2, 1)
    assert t.take().batches == 0


def fake_training_step() -> None:
    warnings.warn(SYNC_WARNING, UserWarning)  # loss.item()
    warnings.warn(SYNC_WARNING, UserWarning)  # labels.cpu()
    torch.cuda.empty_cache()


def test_sync_detector_counts_and_names_call_sites(monkeypatch: pytest.MonkeyPatch) -> None:
    emptied: list[int] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    modes: list[int] = []
    detector = SyncDetector(set_mode=modes.append)
    original_showwarning = warnings.showwarning
    detector.install()
    try:
        detector.begin_step()
        fake_training_step()
        assert detector.end_step() == 3
        detector.begin_step()
        fake_training_step()
        assert detector.end_step() == 3
        # Outside a step the warning is not ours: it reaches the user.
        with pytest.warns(UserWarning, match="synchronizing"):
            warnings.warn(SYNC_WARNING, UserWarning)
    finally:
        detector.uninstall()
    assert emptied == [1, 1]
    assert modes == [1, 0, 1, 0]
    assert detector.total == 6
    sites = dict(detector.top_sites())
    assert len(sites) == 3 and all(n == 2 for n in sites.values())
    assert all("test_callback.py" in s and "fake_training_step" in s for s in sites)
    assert any("[torch.cuda.empty_cache()]" in s for s in sites)
    assert warnings.showwarning is original_showwarning
    assert not any(f[1] is not None and "synchronizing" in f[1].pattern for f in warnings.filters)
    assert torch.cuda.empty_cache is not None and torch.cuda.empty_cache() is None and emptied == [1, 1, 1]


def _frame_in(path: str, source: str, namespace: dict[str, Any]) -> Any:
    """A function whose frames carry ``path``: what a frame of that installed package looks like to the detector."""
    exec(compile(source, path, "exec"), namespace)
    return namespace["fn"]


def test_sync_inside_lightning_is_blamed_on_lightning_not_the_fit_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning

    lightning_file = os.path.join(os.path.dirname(lightning.__file__), "pytorch", "loops", "fake_loop.py")
    torch_file = os.path.join(os.path.dirname(torch.__file__), "fake_tensor_op.py")
    # torchmetrics (or any package whose name starts with "torch") is not torch: its frames are call sites.
    torchmetrics_file = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "torchmetrics", "fake_metric.py")
    ns: dict[str, Any] = {"warnings": warnings, "SYNC_WARNING": SYNC_WARNING}
    # Lightning -> torch -> the sync: Lightning's own line is the site, not the user's trainer.fit(...) below.
    ns["torch_op"] = _frame_in(torch_file, "def fn():\n    warnings.warn(SYNC_WARNING, UserWarning)\n", {**ns})
    lightning_step = _frame_in(lightning_file, "def fn():\n    x = 1\n    torch_op()\n", ns)
    metric_compute = _frame_in(torchmetrics_file, "def fn():\n    warnings.warn(SYNC_WARNING, UserWarning)\n", {**ns})

    detector = SyncDetector(set_mode=lambda mode: None, patch_empty_cache=False)
    detector.install()
    try:
        detector.begin_step()
        lightning_step()  # stands in for `trainer.fit(model)` in the user's script
        metric_compute()
        fake_training_step()  # the user's own syncs keep their line
        detector.end_step()
    finally:
        detector.uninstall()
    sites = dict(detector.top_sites(10))
    assert sites.pop(f"lightning internals ({os.path.join('lightning', 'pytorch', 'loops', 'fake_loop.py')}:3)") == 1, (
        sites
    )
    assert sites.pop("fake_metric.py:2 in fn") == 1, sites
    assert len(sites) == 2 and all("fake_training_step" in s and "test_callback.py" in s for s in sites), sites


def test_callback_pickles_before_setup_and_validates_arguments() -> None:
    import pickle

    monitor = pickle.loads(pickle.dumps(GPUUtilizationMonitor(diagnose_every_n_steps=5)))
    assert monitor.diagnose_every_n_steps == 5 and monitor.last_diagnosis is None
    with pytest.raises(ValueError, match="log_every_n_steps"):
        GPUUtilizationMonitor(log_every_n_steps=0)
    with pytest.raises(ValueError, match="flops_per_sample"):
        GPUUtilizationMonitor(flops_per_sample=-1)


def test_single_process_fit_logs_mfu_and_periodic_diagnosis(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """In-process fit (one CPU device): MFU from measured FLOPs, diagnosis every 4 steps, JSON."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    # Measuring FLOPs must leave the model as it was: BatchNorm statistics, train mode, no grads.
    probe = Model()
    running_mean = probe.net[1].running_mean.clone()
    flops = GPUUtilizationMonitor(flops_per_sample="auto")._measure_flops(
        probe, (torch.randn(16, 16), torch.randn(16, 1))
    )
    assert flops == pytest.approx(3 * 2 * (16 * 32 + 32), rel=0.1)  # 3 x the multiply-adds of one sample's forward
    assert torch.equal(probe.net[1].running_mean, running_mean) and probe.training and probe.net[1].training
    assert all(p.grad is None for p in probe.parameters())

    model = Model()
    monitor = GPUUtilizationMonitor(
        log_every_n_steps=2, diagnose_every_n_steps=4, flops_per_sample="auto", peak_flops_per_device=1e12
    )
    trainer = quiet_trainer(max_steps=8, logger=CSVLogger(tmp_path), callbacks=[monitor])
    data = TensorDataset(torch.randn(256, 16), torch.randn(256, 1))
    with caplog.at_level(logging.INFO):
        trainer.fit(model, DataLoader(data, batch_size=16))
    reports = [r.getMessage() for r in caplog.records if "GPUUtilizationMonitor diagnosis" in r.getMessage()]
    assert [m.splitlines()[0] for m in reports] == [
        "GPUUtilizationMonitor diagnosis over steps 1-4 (step 4):",
        "GPUUtilizationMonitor diagnosis over steps 5-8 (step 8):",
        "GPUUtilizationMonitor diagnosis over the whole fit (step 8):",
    ]

    assert monitor._flops == pytest.approx(flops)
    rows = list(csv.DictReader(open(Path(trainer.log_dir) / "metrics.csv")))
    logged_steps = sorted({int(r["step"]) for r in rows if r.get("throughput/mfu")})
    assert logged_steps == [1, 3, 5, 7]  # where Lightning logs the 2nd, 4th, ... step's metrics
    assert all(0 < float(r["throughput/mfu"]) < 1 for r in rows if r.get("throughput/mfu"))
    assert "time/rank0/comm_pct" not in rows[0]  # one device: nothing to synchronise
    diagnoses, meta = load_diagnoses(Path(trainer.log_dir) / "diagnosis.json")
    assert meta["scope"] == "fit" and meta["step"] == 8
    assert [d.device for d in diagnoses] == ["rank0"] and diagnoses[0].evidence["mfu"] > 0
    assert monitor.last_diagnosis[0].verdict == diagnoses[0].verdict


def test_logs_on_lightnings_step_axis_with_two_optimizers(tmp_path: Path) -> None:
    """A GAN steps two optimizers per batch: global_step runs 2x, Lightning's own x-axis does not."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class GAN(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.gen, self.disc = nn.Linear(4, 4), nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            for opt, loss in zip(
                self.optimizers(), (self.disc(self.gen(batch[0])).mean(), self.disc(batch[0]).pow(2).mean())
            ):
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            self.log("loss", loss, on_step=True, on_epoch=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.gen.parameters(), lr=0.01), torch.optim.SGD(self.disc.parameters(), lr=0.01)

    monitor = GPUUtilizationMonitor(write_json=False)
    trainer = quiet_trainer(max_steps=14, log_every_n_steps=2, logger=CSVLogger(tmp_path), callbacks=[monitor])
    trainer.fit(GAN(), DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8))
    assert trainer.global_step == 14  # 7 batches x 2 optimizers
    rows = read_metrics(Path(trainer.log_dir) / "metrics.csv")
    step_rows = sorted({int(r["step"]) for r in rows if r.get("loss_step")})
    epoch_row = [int(r["step"]) for r in rows if r.get("loss_epoch")]
    monitor_steps = sorted({int(r["step"]) for r in rows if r.get("time/rank0/step_ms")})
    assert step_rows == [1, 3, 5] and epoch_row == [6]  # 0-based batches, not global_step
    # Full windows land on Lightning's step rows; the last, partial window (batch 7) on the last batch's step,
    # where Lightning puts the epoch-end metrics: one x-axis for the loss and the monitor.
    assert monitor_steps == [*step_rows, *epoch_row]


# --------------------------------------------------------------------------- real multi-process runs
def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- real GPU (skipped without CUDA)
@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_real_nvml_reads_this_process_gpu() -> None:
    pynvml = require_or_skip("pynvml")
    pynvml.nvmlInit()
    try:
        handles = match_nvml_handles(pynvml, [0])
        assert 0 in handles, "cuda:0 must match an NVML device by UUID"
        sampler = BackgroundSampler([NvmlSource("rank0", pynvml, handles[0])], interval_s=0.1)
        sampler.start()
        a = torch.randn(4096, 4096, device="cuda")
        for _ in range(200):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        import time

        time.sleep(0.5)
        sampler.stop()
        window = sampler.collect()["rank0"]
    finally:
        pynvml.nvmlShutdown()
    assert 0 <= window["util_pct"].mean <= 100 and window["util_pct"].max > 0
    total = torch.cuda.get_device_properties(0).total_memory / 2**30
    assert window["mem_total_gb"].last == pytest.approx(total, rel=0.05)
    # What a data-centre GPU's NVML has besides: temperature and PCIe always, the energy counter from Volta on.
    assert 0 < window["temp_c"].max < 110 and window["pcie_tx_mb_s"].count > 0
    assert {"throttle_power_pct", "throttle_thermal_pct"} <= window.keys()
    if "energy_j" in window:
        assert window["energy_j"].total > 0  # 200 matmuls of 4096^2 use energy


@pytest.mark.gpu
@RunIf(min_cuda_gpus=1)
def test_real_sync_detection_names_item_call(tmp_path: Path) -> None:
    import lightning.pytorch as pl
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(16, 1)

        def training_step(self, batch, batch_idx):
            loss = nn.functional.mse_loss(self.net(batch[0]), batch[1])
            self.seen = loss.item()  # the implicit sync the detector must name
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    monitor = GPUUtilizationMonitor(detect_sync=True, log_every_n_steps=2)
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        max_steps=4,
        default_root_dir=tmp_path,
        callbacks=[monitor],
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
    )
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8))
    assert any("loss.item()" in site for site, _ in monitor.sync_sites), monitor.sync_sites
    assert monitor.last_diagnosis[0].evidence["host_syncs_per_step"] >= 1
    assert "gpu_util_pct" in monitor.last_diagnosis[0].evidence
