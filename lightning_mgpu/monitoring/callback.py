"""GPUUtilizationMonitor: per-rank utilisation, step timing and bottleneck diagnosis for every strategy.

Every rank samples its own device(s) on a background thread (NVML on CUDA, psutil on CPU) and
times its batches on the training thread with nothing but clock reads. Once per logging window
each rank sends one small tensor to rank 0 (``strategy.all_gather``), and rank 0 logs every
rank's values through ``trainer.loggers``. At the end of fit rank 0 prints a per-device verdict
(input-bound, communication-bound, compute-bound, healthy, low-utilisation-unexplained) with
advice, keeps it as ``monitor.last_diagnosis`` and writes it to ``<log_dir>/diagnosis.json``.

The metric keys are documented in :mod:`lightning_mgpu.monitoring.keys`.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.data import extract_batch_size
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn
from typing_extensions import override

from lightning_mgpu.data.loader import loader_batch_size
from lightning_mgpu.monitoring import keys as K
from lightning_mgpu.monitoring.diagnosis import (
    Diagnosis,
    DiagnosisThresholds,
    diagnose,
    format_table,
    write_diagnoses,
)
from lightning_mgpu.monitoring.export import (
    TIMELINE_PREFIX,
    Destination,
    DeviceInfo,
    ExportContext,
    TimelineExport,
    TimelineExportConfig,
    destinations,
    open_exports,
)
from lightning_mgpu.monitoring.peak_flops import dense_peak_flops, peak_phrase
from lightning_mgpu.monitoring.samplers import (
    BackgroundSampler,
    NvmlSource,
    ProcessCpuSource,
    Stat,
    StatSet,
    match_nvml_handles,
    merge_stat_sets,
)
from lightning_mgpu.monitoring.step_timing import StepTimer, SyncDetector, TimingAcc
from lightning_mgpu.monitoring.timeline import Timeline, timeline_path
from lightning_mgpu.utilities.collectives import gather_rows
from lightning_mgpu.utilities.imports import is_available, require
from lightning_mgpu.utilities.logging_steps import batches_that_stepped

# What each device sends to rank 0, in this order. (group, name); MFU is per device here and
# logged as the all-rank mean only.
FIELDS: tuple[tuple[str, str], ...] = (
    *((K.GPU, n) for n in K.GPU_NAMES),
    *((K.CPU, n) for n in K.CPU_NAMES),
    *((K.TIME, n) for n in K.TIME_NAMES),
    (K.THROUGHPUT, K.SAMPLES_PER_SEC),
    (K.THROUGHPUT, K.MFU),
)
_PROCESS = "__process__"  # sampler label of the per-process CPU source
#: What the training thread's timing adds to the time line (per device, once per sample interval and at each logging
#: window's end): the data-wait share and its neighbours, which no background poll can read.
TIMELINE_WINDOW_FIELDS = (
    (K.TIME, K.DATA_WAIT_PCT),
    (K.TIME, K.DATA_WAIT_MS),
    (K.TIME, K.STEP_MS),
    (K.THROUGHPUT, K.SAMPLES_PER_SEC),
)
__all__ = ["TIMELINE_PREFIX", "GPUUtilizationMonitor", "local_devices", "local_labels"]
_now = time.perf_counter  # the training-thread clock (a module attribute so tests can drive it)


def local_devices(trainer: pl.Trainer) -> list[torch.device]:
    """The devices this process drives: all of them under ``dp`` (one process, several devices), else the root
    device."""
    strategy = trainer.strategy
    parallel = list(getattr(strategy, "parallel_devices", None) or [])
    if trainer.world_size == 1 and len(parallel) > 1:
        return [torch.device(d) for d in parallel]
    return [torch.device(strategy.root_device)]


def local_labels(rank: int, devices: Sequence[torch.device]) -> list[str]:
    """``rank{r}`` for one device; ``rank{r}_dev{d}`` (``d`` = torch's device index) for several."""
    if len(devices) == 1:
        return [K.device_label(rank)]
    return [K.device_label(rank, d.index if d.index is not None else i) for i, d in enumerate(devices)]


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _logging_step(trainer: pl.Trainer) -> int:
    """Lightning's logging step (see :func:`batches_that_stepped`).

    ``LoggerConnector.log_metrics`` logs a batch's metrics at this value (read before the batch's own
    increment, which comes after ``on_train_batch_end``), and epoch-end metrics at the last batch's.
    """
    return batches_that_stepped(trainer)


class GPUUtilizationMonitor(Callback):
    r"""Log every rank's device utilisation and step timing, and diagnose what holds training back.

    Logged every ``log_every_n_steps`` optimizer steps by rank 0, for every rank, through
    ``trainer.loggers`` (keys in :mod:`lightning_mgpu.monitoring.keys`), at the step Lightning
    logs its own metrics at (batches that stepped; not ``global_step``, which counts each optimizer of
    a GAN separately):
    ``gpu/rank{r}/util_pct`` (+ ``_min``/``_max``), ``mem_used_gb`` (window max), ``mem_total_gb``,
    ``power_w``, ``sm_clock_mhz``; ``cpu/rank{r}/util_pct`` (+ ``_min``/``_max``), ``rss_gb``;
    ``time/rank{r}/data_wait_pct``, ``data_wait_ms``, ``step_ms``, and with gradient accumulation
    ``comm_pct``, ``synced_step_ms``, ``unsynced_step_ms``; ``throughput/rank{r}/samples_per_sec``;
    ``throughput/samples_per_sec`` (all devices) and ``throughput/mfu`` when the FLOPs are known.
    Under ``dp`` the device label is ``rank0_dev{d}``.

    Nothing runs on the device and the training thread only reads clocks: sampling is done by a
    background thread per process (NVML through nvidia-ml-py on CUDA, psutil for the process's
    CPU and memory), and the ranks meet once per window in one small ``all_gather``.

    Args:
        log_every_n_steps: optimizer steps per logging window; default ``Trainer(log_every_n_steps)``.
        sample_interval_s: seconds between background polls. NVML utilisation, power and clock
            are read from the driver's sample buffer, so every driver sample counts whatever this is.
        diagnose_every_n_steps: also diagnose every this many optimizer steps (over the steps since
            the last diagnosis). The end-of-fit diagnosis covers the whole fit.
        thresholds: where each verdict starts (:class:`~lightning_mgpu.monitoring.diagnosis.DiagnosisThresholds`).
        flops_per_sample: training FLOPs (forward + backward) per sample, for MFU. ``"auto"``
            measures the forward of one sample on the first batch (``measure_flops``) and takes 3x.
        peak_flops_per_device: the device's peak FLOP/s; default its dense peak
            (:func:`~lightning_mgpu.monitoring.peak_flops.dense_peak_flops`: Lightning's table, with the H200's
            dense figures; CUDA only; set it on CPU).
        detect_sync: count implicit host-device synchronisations per step and name their call
            sites (CUDA only; uses ``torch.cuda.set_sync_debug_mode("warn")`` during steps, which
            costs a little: leave it off for production runs).
        write_json: rank 0 writes each diagnosis to ``<trainer.log_dir>/<json_filename>``.
        json_filename: the file name of the diagnosis JSON.
        use_nvml: read GPUs through NVML (needs ``nvidia-ml-py``; without it only step timing and
            CPU metrics are logged, with a warning).
        timeline: also write every poll, with the training phase, to ``<log_dir>/timeline/rank<R>.jsonl``
            (:mod:`~lightning_mgpu.monitoring.timeline`; the dashboard draws it over wall time, validation and
            checkpoint saves shaded). The batches' data-wait share, step time and samples/s join it once per
            sample interval.
        timeline_export: also write the time line into the Trainer's loggers, each under its own names
            (:mod:`~lightning_mgpu.monitoring.export`): an ``MLFlowLogger`` run (MLflow's ``system/gpu_{i}_...``
            names), a ``TensorBoardLogger`` folder (a run per rank), beside a ``CSVLogger``'s ``metrics.csv``, a
            ``WandbLogger`` run (W&B's ``gpu.{i}.*`` names; the other ranks in runs of their own, grouped), and
            the bundle's ``NeptuneLogger`` run (rank 0, ``monitoring/timeline/``). ``True``: into every one of these
            the Trainer has; a :class:`~lightning_mgpu.monitoring.export.TimelineExportConfig` to choose; ``False``:
            none. Needs ``timeline=True``.

    Raises:
        ValueError: an argument is out of range.

    Example::

        from lightning_mgpu.callbacks import GPUUtilizationMonitor

        monitor = GPUUtilizationMonitor(flops_per_sample="auto")
        trainer = Trainer(strategy="ddp", devices=4, callbacks=[monitor], logger=CSVLogger("logs"))
        trainer.fit(model, datamodule=dm)
        monitor.last_diagnosis[0].verdict    # "input-bound", ... (rank 0; also in log_dir/diagnosis.json)
    """

    def __init__(
        self,
        log_every_n_steps: int | None = None,
        sample_interval_s: float = 0.5,
        diagnose_every_n_steps: int | None = None,
        thresholds: DiagnosisThresholds | None = None,
        flops_per_sample: float | Literal["auto"] | None = None,
        peak_flops_per_device: float | None = None,
        detect_sync: bool = False,
        write_json: bool = True,
        json_filename: str = "diagnosis.json",
        use_nvml: bool = True,
        timeline: bool = True,
        timeline_export: TimelineExportConfig | bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("log_every_n_steps", log_every_n_steps),
            ("diagnose_every_n_steps", diagnose_every_n_steps),
        ):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"GPUUtilizationMonitor({name}={value!r}): pass a positive integer or None")
        if not sample_interval_s > 0:
            raise ValueError(
                f"GPUUtilizationMonitor(sample_interval_s={sample_interval_s!r}): pass a positive number of seconds"
            )
        if (
            flops_per_sample is not None
            and flops_per_sample != "auto"
            and not (isinstance(flops_per_sample, (int, float)) and flops_per_sample > 0)
        ):
            raise ValueError(
                f"GPUUtilizationMonitor(flops_per_sample={flops_per_sample!r}): pass a positive number, 'auto' or None"
            )
        if peak_flops_per_device is not None and not peak_flops_per_device > 0:
            raise ValueError(
                f"GPUUtilizationMonitor(peak_flops_per_device={peak_flops_per_device!r}): pass a positive number or"
                " None"
            )
        self.log_every_n_steps = log_every_n_steps
        self.sample_interval_s = sample_interval_s
        self.diagnose_every_n_steps = diagnose_every_n_steps
        self.thresholds = thresholds or DiagnosisThresholds()
        self.flops_per_sample = flops_per_sample
        self.peak_flops_per_device = peak_flops_per_device
        self.detect_sync = detect_sync
        self.write_json = write_json
        self.json_filename = json_filename
        self.use_nvml = use_nvml
        self.timeline = timeline
        if not isinstance(timeline_export, (bool, TimelineExportConfig)):
            raise ValueError(
                f"GPUUtilizationMonitor(timeline_export={timeline_export!r}): pass True, False or a"
                " TimelineExportConfig"
            )
        # True is every writer with its defaults; False none (the time line still goes to its own files).
        self.timeline_export: TimelineExportConfig | None = (
            TimelineExportConfig() if timeline_export is True else timeline_export or None
        )

        #: The last diagnosis (rank 0; ``None`` elsewhere and before the first).
        self.last_diagnosis: list[Diagnosis] | None = None
        #: The metrics of the last logged window (rank 0).
        self.last_metrics: dict[str, float] = {}
        #: The most frequent implicit sync call sites of this rank (``detect_sync=True``).
        self.sync_sites: list[tuple[str, int]] = []
        #: Where the last diagnosis JSON was written (rank 0).
        self.diagnosis_path: Path | None = None
        self._reset_runtime()

    # ------------------------------------------------------------------ state
    def _reset_runtime(self) -> None:
        # Everything here is rebuilt in setup(): the callback stays picklable for ddp_spawn.
        self._active = False
        self._devices: list[torch.device] = []
        self._labels: list[str] = []
        self._rank = 0
        self._sampler: BackgroundSampler | None = None
        self._nvml: Any = None
        self._detector: SyncDetector | None = None
        self._timer = StepTimer()
        self._period_acc, self._fit_acc = TimingAcc(), TimingAcc()
        # The window's batches already handed to the time line (_timeline_timing), and when that last happened.
        self._window_acc = TimingAcc()
        self._timing_mark: float | None = None
        self._period_stats: dict[str, StatSet] = {}
        self._fit_stats: dict[str, StatSet] = {}
        self._log_dir: str | None = None
        self._peak_flops: float | None = None
        self._flops: float | None = self.flops_per_sample if isinstance(self.flops_per_sample, (int, float)) else None
        self._context: dict[str, Any] = {}
        self._replicas = 1
        self._log_n = 50
        self._flops_measured = False
        self._stepped = False
        self._window_steps = 0  # optimizer steps in the current logging window
        self._period_steps = 0  # ... since the last periodic diagnosis
        self._period_start: int | None = None  # Lightning's logging step before the period's first batch
        self._timeline: Timeline | None = None
        self._exports: list[TimelineExport] = []  # this rank's writers into the Trainer's loggers
        self._export_index = 0  # time line points already handed to them
        self._device_info: dict[str, DeviceInfo] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # Threads, locks and the NVML module do not pickle; ddp_spawn rebuilds them in setup().
        state.update(_sampler=None, _nvml=None, _detector=None, _active=False, _timeline=None, _exports=[])
        return state

    # ------------------------------------------------------------------ setup / teardown
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._reset_runtime()
        self._rank = trainer.global_rank
        self._devices = local_devices(trainer)
        self._labels = local_labels(self._rank, self._devices)
        # trainer.log_dir broadcasts from rank 0, so every rank resolves it here, together; so are the loggers' runs.
        config = self.timeline_export if self.timeline else None
        found = self._find_destinations(trainer, config) if config is not None else []
        self._log_dir = self._files_dir(trainer, trainer.log_dir, found)
        self._peak_flops = self._resolve_peak_flops(trainer)
        self._context = self._run_context(trainer)
        self._replicas = max(trainer.world_size, len(self._devices))
        self._log_n = self.log_every_n_steps or max(1, int(getattr(trainer, "log_every_n_steps", 50) or 50))
        if self.timeline:
            path = timeline_path(self._log_dir, self._rank) if self._log_dir else None
            self._timeline = Timeline(path)
            self._timeline.set_step(trainer.global_step)  # a resumed fit goes on from its step
            self._export_index = len(self._timeline.points)  # a resumed fit's earlier points are in the loggers
        sources = self._build_sources()
        if self._timeline is not None and self.timeline_export is not None and found:
            context = ExportContext(self._rank, trainer.world_size, dict(self._device_info), self.timeline_export)
            self._exports = open_exports(found, trainer.loggers, context)
        self._sampler = BackgroundSampler(sources, self.sample_interval_s, on_poll=self._on_poll)
        self._sampler.start()
        if self.detect_sync:
            if any(d.type == "cuda" for d in self._devices):
                self._detector = SyncDetector()
                self._detector.install()
            else:
                rank_zero_warn(
                    "GPUUtilizationMonitor(detect_sync=True) needs CUDA devices; sync detection is off for this run."
                )
        self._active = True

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._shutdown()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._shutdown()

    def _on_poll(self, t: float, readings: list[tuple[str, str, float]]) -> None:
        """The sampler thread's readings, into the time line under the logged metrics' names."""
        if self._timeline is None:
            return
        values = {
            (f"{K.CPU}/rank{self._rank}/{name}" if label == _PROCESS else f"{K.GPU}/{label}/{name}"): value
            for label, name, value in readings
        }
        self._timeline.record(t, values)

    def _phase(self, phase: str) -> None:
        if self._timeline is not None:
            self._timeline.set_phase(phase, time.time())

    def _shutdown(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if self._timeline is not None:
            self._timeline.set_phase("idle", time.time())
            self._flush_timeline()
        for export in self._exports:
            self._call_export(export, "close")
        self._exports = []
        if self._detector is not None:
            self.sync_sites = self._detector.top_sites(10)
            self._detector.uninstall()
            self._detector = None
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001  (shutting down a sensor must not mask the run's result)
                pass
            self._nvml = None
        self._active = False

    def _build_sources(self) -> list[Any]:
        sources: list[Any] = [ProcessCpuSource(_PROCESS)]
        cuda = [
            (label, d.index if d.index is not None else 0)
            for label, d in zip(self._labels, self._devices)
            if d.type == "cuda"
        ]
        self._device_info = {label: DeviceInfo(label) for label in self._labels}
        self._device_info.update({label: DeviceInfo(label, cuda_index=index) for label, index in cuda})
        if not cuda or not self.use_nvml:
            return sources
        nvml = self._init_nvml()
        if nvml is None:
            return sources
        handles = match_nvml_handles(nvml, [index for _, index in cuda])
        gpus = [(index, NvmlSource(label, nvml, handles[index])) for label, index in cuda if index in handles]
        for index, source in gpus:
            # The devices as the exports name them: torch's index and NVML's (physical) one, side by side.
            self._device_info[source.label] = DeviceInfo(
                source.label, index, source.nvml_index, source.uuid, source.power_limit_w
            )
        return sources + [source for _, source in gpus]

    @staticmethod
    def _find_destinations(trainer: pl.Trainer, config: TimelineExportConfig) -> list[Destination]:
        """Where the Trainer's loggers keep their runs, on every rank (every rank calls this, in setup)."""
        found = destinations(trainer.loggers, config) if trainer.is_global_zero else []
        if trainer.world_size > 1:
            # Lightning's loggers are open on rank 0 only: it says where their runs are, every rank writes there.
            found = trainer.strategy.broadcast(found)
        return found

    @staticmethod
    def _files_dir(trainer: pl.Trainer, log_dir: str | None, found: Sequence[Destination]) -> str | None:
        """Where the monitor's own files go (diagnosis.json, timeline/): Lightning's ``trainer.log_dir``, except with an
        MLFlowLogger first. Lightning's log_dir is then MLflow's store itself: a file store's root, where a folder
        reads as a malformed experiment, or ``None`` for a sqlite store or a server, where nothing would be written.
        They go to ``<default_root_dir>/gpu_monitor/<run id>`` instead (and diagnosis.json into the run too); so they
        do with a ``WandbLogger`` first that was given no ``save_dir`` (Lightning's log_dir is then ``None``)."""
        first = next((d for d in found if d.logger_index == 0 and d.run_id), None)
        if first is None or first.run_id is None or (first.kind != "mlflow" and log_dir is not None):
            return log_dir
        return str(Path(trainer.default_root_dir) / "gpu_monitor" / first.run_id)

    def _call_export(self, export: TimelineExport, method: str, *args: Any) -> None:
        """One writer's call; a writer that fails is dropped with a warning (its logger's store went away, ...)."""
        try:
            getattr(export, method)(*args)
        except Exception as err:  # noqa: BLE001  (a logger's store must not stop training; the files still have it)
            # Said on every rank: each writes its own points, and one rank may fail alone (its store unreachable).
            warnings.warn(
                f"GPUUtilizationMonitor (rank {self._rank}): stopped writing the time line to {export.kind} ({err!r});"
                " the time line's file and the window means go on",
                stacklevel=2,
            )
            if export in self._exports:
                self._exports.remove(export)

    def _init_nvml(self) -> Any:
        if not is_available("pynvml"):
            rank_zero_warn(
                "GPUUtilizationMonitor: GPU utilisation, memory, power and clocks need NVML through `nvidia-ml-py`"
                " (pip install 'lightning_mgpu[gpu]'); logging step timing and CPU metrics only."
            )
            return None
        try:
            nvml = require("pynvml", "GPUUtilizationMonitor")
            nvml.nvmlInit()
        except Exception as err:  # noqa: BLE001  (MissingDependencyError, no driver, ...: monitor without NVML)
            rank_zero_warn(
                f"GPUUtilizationMonitor: NVML is unavailable ({err!r}); logging step timing and CPU metrics only."
            )
            return None
        self._nvml = nvml
        return nvml

    def _resolve_peak_flops(self, trainer: pl.Trainer) -> float | None:
        if self.flops_per_sample is None:
            return None
        if self.peak_flops_per_device is not None:
            return float(self.peak_flops_per_device)
        device = self._devices[0]
        if device.type != "cuda":
            rank_zero_warn(
                "GPUUtilizationMonitor: MFU needs the device's peak FLOP/s, which Lightning only knows for GPUs;"
                " pass GPUUtilizationMonitor(peak_flops_per_device=...) to log throughput/mfu on this device."
            )
            return None
        from lightning.pytorch.callbacks.throughput_monitor import (
            _plugin_to_compute_dtype,
        )

        dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
        peak = dense_peak_flops(device, dtype)
        # Said once, so that an MFU figure can be read against the peak it used (sparse and dense differ by 2x).
        name = torch.cuda.get_device_name(device)
        rank_zero_info(f"GPUUtilizationMonitor: MFU against {name}: {peak_phrase(peak, dtype)}")
        return peak

    @staticmethod
    def _run_context(trainer: pl.Trainer) -> dict[str, Any]:
        strategy = trainer.strategy
        name = getattr(strategy, "strategy_name", None) or type(strategy).__name__
        return {
            "strategy": str(name),
            "precision": str(getattr(trainer, "precision", "")),
            "accelerator": torch.device(strategy.root_device).type,
            "accumulate_grad_batches": getattr(trainer, "accumulate_grad_batches", 1),
            "world_size": trainer.world_size,
        }

    # ------------------------------------------------------------------ timing hooks
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = getattr(trainer, "train_dataloader", None)
        if isinstance(loader, torch.utils.data.DataLoader):
            self._context.update(
                num_workers=loader.num_workers,
                pin_memory=bool(loader.pin_memory),
                persistent_workers=bool(loader.persistent_workers),
                batch_size=loader_batch_size(loader),
            )

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._timer.restart(_now())
        self._phase("train")

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        arrived = _now()
        if not self._active:
            return
        if self._timeline is not None and self._timeline.phase != "train":
            self._phase("train")  # back from a checkpoint save
        step_start = arrived
        if self.flops_per_sample == "auto" and not self._flops_measured:
            self._flops_measured = True  # once per fit, even when it fails
            self._flops = self._measure_flops(pl_module, batch)
            step_start = _now()  # the measurement is neither data wait nor training
        self._stepped = False
        if self._period_start is None:
            self._period_start = _logging_step(trainer)
        if self._detector is not None:
            self._detector.begin_step()
        self._timer.batch_start(arrived, step_start)

    @override
    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        # The micro-batch that steps is the one that synchronised gradients.
        self._stepped = True

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = _now()
        if not self._active:
            return
        syncs = self._detector.end_step() if self._detector is not None else 0
        self._timer.batch_end(now, self._batch_size(batch), self._stepped, syncs)
        if not self._stepped:
            return  # windows count optimizer steps, as log_every_n_steps does; every rank steps alike
        if self._timeline is not None:
            self._timeline.step += 1  # optimizer steps, counted here: cheaper than asking the trainer each batch
            # Within a window, the time line gets the timing of the batches since its last timing point once per
            # sample interval: step time and throughput at the resolution of the other samples, where one point
            # per logging window leaves 2 or 3 on a short run.
            if self._timing_mark is None:
                self._timing_mark = now
            elif now - self._timing_mark >= self.sample_interval_s:
                self._timing_mark = now
                part = self._timer.take()
                self._window_acc.merge(part)
                self._timeline_timing(part)
        self._window_steps += 1
        self._period_steps += 1
        every = self.diagnose_every_n_steps
        diagnose_now = every is not None and self._period_steps >= every
        if self._window_steps < self._log_n and not diagnose_now:
            return
        self._flush_window(trainer, step=_logging_step(trainer))
        if diagnose_now:
            # On Lightning's axis, not global_step (which doubles with two optimizers); this batch's
            # increment comes after on_train_batch_end.
            step = _logging_step(trainer) + 1
            span = f"steps {(self._period_start or 0) + 1}-{step}"
            self._period_steps, self._period_start = 0, step
            self._run_diagnosis(trainer, self._period_acc, self._period_stats, scope="period", span=span, step=step)
            self._period_acc, self._period_stats = TimingAcc(), {}
        # The monitor's own work (gather, logging) is not time spent waiting for data.
        self._timer.set_end(_now())

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._timer.pause()
        self._phase("validation")

    @override
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._timer.restart(_now())
        self._phase("idle")  # until the next batch (or a checkpoint save, or the end)

    @override
    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._timer.mark_gap()
        self._phase("checkpoint")  # until the next batch or validation starts

    @override
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._active:
            return
        if self._window_steps:
            if self._sampler is not None:
                # Once per fit: a fit (or last window) shorter than one poll interval still gets the
                # readings that need two polls (CPU utilisation) instead of none. The thread stops
                # first (training is over), so the sources are never read from two threads at once.
                self._sampler.stop()
                self._sampler.poll()
            # The last batch's step: Lightning has counted it by now, and logs epoch-end metrics one lower too.
            self._flush_window(trainer, step=max(0, _logging_step(trainer) - 1))
        if self._detector is not None:
            self.sync_sites = self._detector.top_sites(10)
        self._phase("idle")
        self._flush_timeline()
        # on_train_end runs after the last batch's increment: this is the number of batches that stepped.
        self._run_diagnosis(
            trainer, self._fit_acc, self._fit_stats, scope="fit", span="the whole fit", step=_logging_step(trainer)
        )

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _batch_size(batch: Any) -> float:
        # Fast path for the common (inputs, targets) batch: this runs every batch.
        first = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
        if isinstance(first, torch.Tensor) and first.ndim > 0:
            return float(first.shape[0])
        try:
            return float(extract_batch_size(batch))
        except Exception:  # noqa: BLE001  (an exotic batch must not break training; samples/s is then per batch)
            return 1.0

    def _measure_flops(self, pl_module: pl.LightningModule, batch: Any) -> float | None:
        """Training FLOPs per sample: 3x the forward of one sample (no grads, eval mode, restored)."""
        from lightning.fabric.utilities.throughput import measure_flops

        x = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
        if not isinstance(x, torch.Tensor) or x.ndim == 0 or len(x) == 0:
            rank_zero_warn(
                "GPUUtilizationMonitor(flops_per_sample='auto') needs batches whose first item is the input tensor;"
                " pass the number instead."
            )
            return None
        modes = {m: m.training for m in pl_module.modules()}
        pl_module.eval()  # BatchNorm must not update its running statistics here
        try:
            with torch.no_grad():
                forward = measure_flops(pl_module, lambda: pl_module(x[:1]))
        except Exception as err:  # noqa: BLE001  (an unusual forward signature: no MFU, training goes on)
            rank_zero_warn(
                f"GPUUtilizationMonitor could not measure the model's FLOPs ({err!r}); pass flops_per_sample=... for"
                " MFU."
            )
            return None
        finally:
            for module, mode in modes.items():
                module.training = mode
        return 3.0 * float(forward)  # backward costs about twice the forward

    def _device_values(self, label: str, acc: TimingAcc, stats: Mapping[str, StatSet]) -> list[float]:
        """FIELDS of one device, NaN where unknown."""
        nan = math.nan
        gpu = stats.get(label, {})  # NVML readings of this device (none on CPU)
        cpu = stats.get(_PROCESS, {})  # the process's CPU readings: shared by its devices under dp
        out: dict[tuple[str, str], float] = {}

        def put(group: str, stat: Stat | None, **names: str) -> None:
            if stat is None or stat.count == 0:
                return
            for name, attr in names.items():
                out[(group, name)] = getattr(stat, attr)

        put(K.GPU, gpu.get("util_pct"), util_pct="mean", util_pct_min="min", util_pct_max="max")
        put(K.GPU, gpu.get("mem_used_gb"), mem_used_gb="max")
        put(K.GPU, gpu.get("mem_total_gb"), mem_total_gb="last")
        put(K.GPU, gpu.get("power_w"), power_w="mean")
        put(K.GPU, gpu.get("sm_clock_mhz"), sm_clock_mhz="mean")
        put(K.GPU, gpu.get(K.TEMP_C), temp_c="max")
        put(K.GPU, gpu.get(K.ENERGY_J), energy_j="total")  # each sample holds the energy since the one before
        put(K.GPU, gpu.get(K.PCIE_TX_MB_S), pcie_tx_mb_s="mean")
        put(K.GPU, gpu.get(K.PCIE_RX_MB_S), pcie_rx_mb_s="mean")
        put(K.GPU, gpu.get(K.THROTTLE_POWER_PCT), throttle_power_pct="mean")
        put(K.GPU, gpu.get(K.THROTTLE_THERMAL_PCT), throttle_thermal_pct="mean")
        put(K.GPU, gpu.get(K.THROTTLE_HW_SLOWDOWN_PCT), throttle_hw_slowdown_pct="mean")
        put(K.GPU, gpu.get(K.ECC_ERRORS), ecc_errors="last")
        put(K.CPU, cpu.get("util_pct"), util_pct="mean", util_pct_min="min", util_pct_max="max")
        put(K.CPU, cpu.get("rss_gb"), rss_gb="max")
        out.update(self._timing_values(acc))
        return [out.get(f, nan) for f in FIELDS]

    def _timing_values(self, acc: TimingAcc) -> dict[tuple[str, str], float]:
        if acc.batches == 0 or acc.total_s <= 0:
            return {}
        v = {
            (K.TIME, K.DATA_WAIT_PCT): 100.0 * acc.wait_s / acc.total_s,
            (K.TIME, K.DATA_WAIT_MS): 1000.0 * acc.wait_s / acc.batches,
            (K.TIME, K.STEP_MS): 1000.0 * acc.step_s / acc.batches,
        }
        # Gradients only travel between devices: a single device has nothing to sync.
        if acc.synced_n and acc.unsynced_n and self._replicas > 1:
            synced, unsynced = acc.synced_s / acc.synced_n, acc.unsynced_s / acc.unsynced_n
            v[(K.TIME, K.SYNCED_STEP_MS)] = 1000.0 * synced
            v[(K.TIME, K.UNSYNCED_STEP_MS)] = 1000.0 * unsynced
            # Upper bound: the synced micro-batch also runs optimizer.step().
            v[(K.TIME, K.COMM_PCT)] = 100.0 * max(0.0, synced - unsynced) * acc.synced_n / acc.total_s
        if self._detector is not None:
            v[(K.TIME, K.HOST_SYNCS_PER_STEP)] = acc.host_syncs / acc.batches
        sps = acc.samples / len(self._devices) / acc.total_s  # dp splits each batch across its devices
        v[(K.THROUGHPUT, K.SAMPLES_PER_SEC)] = sps
        if self._flops and self._peak_flops:
            v[(K.THROUGHPUT, K.MFU)] = self._flops * sps / self._peak_flops
        return v

    def _local_rows(self, acc: TimingAcc, stats: Mapping[str, StatSet]) -> list[float]:
        return [x for label in self._labels for x in self._device_values(label, acc, stats)]

    def _gather(self, trainer: pl.Trainer, row: list[float]) -> list[list[float]]:
        """Every rank's row, on every rank: one small all_gather (none with one process)."""
        if trainer.world_size == 1:
            return [row]
        t = torch.tensor(row, dtype=torch.float32, device=trainer.strategy.root_device)
        return gather_rows(trainer.strategy, t).cpu().double().tolist()

    def _per_device(self, rows: list[list[float]]) -> dict[str, dict[tuple[str, str], float]]:
        per_device: dict[str, dict[tuple[str, str], float]] = {}
        n = len(FIELDS)
        for rank, row in enumerate(rows):
            labels = self._labels if rank == self._rank else local_labels(rank, [torch.device("cpu")] * (len(row) // n))
            for k, label in enumerate(labels):
                values = row[k * n : (k + 1) * n]
                per_device[label] = {f: v for f, v in zip(FIELDS, values) if _finite(v)}
        return per_device

    def _flush_window(self, trainer: pl.Trainer, step: int) -> None:
        self._window_steps = 0
        rest = self._timer.take()  # the batches since the time line's last timing point
        acc, self._window_acc = self._window_acc, TimingAcc()
        acc.merge(rest)
        stats = self._sampler.collect() if self._sampler is not None else {}
        self._timeline_timing(rest)
        for into_acc, into_stats in ((self._period_acc, self._period_stats), (self._fit_acc, self._fit_stats)):
            into_acc.merge(acc)
            merge_stat_sets(into_stats, stats)
        rows = self._gather(trainer, self._local_rows(acc, stats))
        self._flush_timeline()
        if not trainer.is_global_zero:
            return
        metrics = self._to_metrics(self._per_device(rows))
        self.last_metrics = metrics
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)

    def _timeline_timing(self, acc: TimingAcc) -> None:
        """The data-wait share, step time and samples/s of ``acc``'s batches, as a point of the time line (none for
        no batches)."""
        if self._timeline is None:  # no time line: nothing to compute
            return
        timing = self._timing_values(acc)
        if not timing:
            return
        self._timeline.record(
            time.time(),
            {
                K.metric_key(group, label, name): timing[(group, name)]
                for label in self._labels
                for group, name in TIMELINE_WINDOW_FIELDS
                if (group, name) in timing
            },
        )

    def _flush_timeline(self) -> None:
        """The time line's new points to its file, and to this rank's writers into the Trainer's loggers."""
        if self._timeline is None:
            return
        try:
            self._timeline.flush()
        except OSError as err:  # a full disk must not stop training: the window means are still logged
            rank_zero_warn(f"GPUUtilizationMonitor: stopped writing the time line ({err}); its window means go on")
            self._timeline = None
            return
        if not self._exports:
            return
        points, self._export_index = self._timeline.since(self._export_index)
        if points:
            for export in list(self._exports):
                self._call_export(export, "write", points)

    @staticmethod
    def _to_metrics(per_device: Mapping[str, Mapping[tuple[str, str], float]]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        total_sps, mfus = 0.0, []
        for label, values in per_device.items():
            for (group, name), value in values.items():
                if (group, name) == (K.THROUGHPUT, K.MFU):
                    mfus.append(value)
                    continue
                metrics[K.metric_key(group, label, name)] = float(value)
            total_sps += values.get((K.THROUGHPUT, K.SAMPLES_PER_SEC), 0.0)
        if any((K.THROUGHPUT, K.SAMPLES_PER_SEC) in v for v in per_device.values()):
            metrics[K.metric_key(K.THROUGHPUT, None, K.SAMPLES_PER_SEC)] = total_sps
        if mfus:
            metrics[K.metric_key(K.THROUGHPUT, None, K.MFU)] = sum(mfus) / len(mfus)
        return metrics

    def _run_diagnosis(
        self, trainer: pl.Trainer, acc: TimingAcc, stats: Mapping[str, StatSet], scope: str, span: str, step: int
    ) -> None:
        rows = self._gather(trainer, self._local_rows(acc, stats))
        self._flush_timeline()
        if not trainer.is_global_zero:
            return
        per_device = {
            label: {K.diagnosis_name(group, name): v for (group, name), v in values.items()}
            for label, values in self._per_device(rows).items()
        }
        if scope == "fit" and step > 0:  # the whole fit's energy, per optimizer step as well
            for values in per_device.values():
                if "gpu_energy_j" in values:
                    values["gpu_energy_j_per_step"] = values["gpu_energy_j"] / step
        diagnoses = diagnose(per_device, self.thresholds, self._context)
        self.last_diagnosis = diagnoses
        sites = self._detector.top_sites(5) if self._detector is not None else self.sync_sites[:5]
        text = format_table(diagnoses)
        if sites:
            text += "\nImplicit host-device syncs (rank 0's call sites, count):\n" + "\n".join(
                f"  {n:6d}  {s}" for s, n in sites
            )
        rank_zero_info(f"GPUUtilizationMonitor diagnosis over {span} (step {step}):\n{text}")
        if self.write_json and self._log_dir is not None:
            self.diagnosis_path = write_diagnoses(
                Path(self._log_dir) / self.json_filename,
                diagnoses,
                scope=scope,
                step=step,
                sync_sites=[[s, n] for s, n in sites],
                thresholds=asdict(self.thresholds),
                context=self._context,
            )
        if scope == "fit" and self._exports:
            # The fit's verdicts, and the files worth keeping with the run: diagnosis.json and a dashboard folder
            # (written by `lightning-mgpu dashboard --serve` during the fit, or a render into the log folder).
            files: dict[str, str] = {}
            if self.diagnosis_path is not None:
                files[self.json_filename] = str(self.diagnosis_path)
            dashboard = Path(self._log_dir) / "dashboard" if self._log_dir is not None else None
            if dashboard is not None and (dashboard / "index.html").is_file():
                files["dashboard"] = str(dashboard)
            verdicts = {d.device: d.verdict for d in diagnoses}
            for export in list(self._exports):
                self._call_export(export, "finish", verdicts, files)
