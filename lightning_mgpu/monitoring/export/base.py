"""What every time-line export shares: its settings, the devices it names, where it writes, and the writer's shape.

An export takes a rank's time line points (:mod:`lightning_mgpu.monitoring.timeline`: ``{"t", "step", "phase",
"mark"?, "values"}``) as the monitor flushes them, and writes them into one logger's own store under that logger's
names. Each rank writes its own points (Lightning's loggers write on rank 0 only, so rank 0 says where at setup and
every rank writes there); nothing is gathered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from lightning_mgpu.monitoring.timeline import PHASES

#: A phase as a number, for stores that keep only numbers (MLflow): the index in :data:`PHASES`.
PHASE_CODES: dict[str, int] = {phase: i for i, phase in enumerate(PHASES)}
#: The legend of :data:`PHASE_CODES`, as a tag or a text: ``"0=idle 1=train 2=validation 3=checkpoint"``.
PHASE_LEGEND = " ".join(f"{code}={phase}" for phase, code in PHASE_CODES.items())


@dataclass(frozen=True)
class TimelineExportConfig:
    """What :class:`~lightning_mgpu.monitoring.GPUUtilizationMonitor` writes into the Trainer's loggers.

    Args:
        mlflow: into an ``MLFlowLogger``'s run: MLflow's system-metric names, our extras under ``prefix``, the
            verdicts as tags.
        tensorboard: into a ``TensorBoardLogger``'s folder, one TensorBoard run per rank (``timeline/rank<R>``).
        csv: beside a ``CSVLogger``'s ``metrics.csv``, ``timeline_rank<R>.csv``.
        neptune: into the bundle's ``NeptuneLogger`` run (rank 0), under ``monitoring/timeline/``.
        wandb: into a ``WandbLogger``'s run (rank 0) and a run per other rank in its group: W&B's GPU names
            (``gpu.{i}.gpu``, ...), our extras under ``prefix``, against the samples' wall time.
        prefix: where the values without an MLflow system-metric name go (``timeline/cpu/rank0/util_pct``, ...).
        rank_in_names: MLflow names carry the rank (``system/rank1/gpu_0_...``). ``None``: when the run has several
            ranks (MLflow's own names are per machine; two ranks of one run would otherwise write one series).
        mlflow_batch: metrics per MLflow ``log_batch`` call (MLflow accepts 1,000 at most).
        mlflow_artifacts: also upload ``diagnosis.json`` and a dashboard folder (``<log_dir>/dashboard``) if one
            was written.
        wandb_rank_runs: ranks other than 0 open a W&B run of their own (W&B's pattern for several processes: a run
            per process, grouped); ``False``: only rank 0's time line goes to W&B.

    Example::

        GPUUtilizationMonitor(timeline_export=TimelineExportConfig(tensorboard=False, rank_in_names=True))
    """

    mlflow: bool = True
    tensorboard: bool = True
    csv: bool = True
    neptune: bool = True
    wandb: bool = True
    prefix: str = "timeline"
    rank_in_names: bool | None = None
    mlflow_batch: int = 1000
    mlflow_artifacts: bool = True
    wandb_rank_runs: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.mlflow_batch <= 1000:
            raise ValueError(f"TimelineExportConfig(mlflow_batch={self.mlflow_batch}): pass 1 to 1000")
        if not self.prefix or self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise ValueError(f"TimelineExportConfig(prefix={self.prefix!r}): pass a name such as 'timeline'")


@dataclass(frozen=True)
class DeviceInfo:
    """One device of a rank, under every numbering a reader meets.

    Args:
        label: the monitor's device label (``rank0``, ``rank0_dev1``).
        cuda_index: torch's index (``cuda:<i>``, after ``CUDA_VISIBLE_DEVICES``); ``None`` on CPU.
        nvml_index: NVML's (the physical, PCI-order index nvidia-smi shows); ``None`` without NVML.
        uuid: the GPU's UUID, where known.
        power_limit_w: the enforced power limit (MLflow's ``_power_usage_percentage`` divides by it).
    """

    label: str
    cuda_index: int | None = None
    nvml_index: int | None = None
    uuid: str | None = None
    power_limit_w: float | None = None

    def describe(self) -> str:
        """``cuda:0 = NVML GPU 3 (GPU-...)``: what a tag or a text says of it."""
        if self.cuda_index is None:
            return "cpu"
        physical = f"NVML GPU {self.nvml_index}" if self.nvml_index is not None else "NVML index unknown"
        return f"cuda:{self.cuda_index} = {physical}" + (f" ({self.uuid})" if self.uuid else "")


@dataclass(frozen=True)
class Destination:
    """Where one logger keeps its run, said by rank 0 and sent to every rank (plain data: it is broadcast).

    Args:
        kind: ``mlflow``, ``tensorboard``, ``csv``, ``neptune`` or ``wandb``.
        logger_index: the logger's place in ``trainer.loggers`` (the same on every rank).
        where: the MLflow tracking URI, the logger's version folder, or W&B's folder (the run's ``dir``).
        run_id: the MLflow run, or rank 0's W&B run.
        options: what else a rank needs to open its writer, as ``(name, value)`` pairs (W&B: project, entity, group,
            name and mode of rank 0's run).
    """

    kind: str
    logger_index: int
    where: str = ""
    run_id: str | None = None
    options: tuple[tuple[str, str], ...] = ()


@dataclass
class ExportContext:
    """What a writer knows of the rank it writes for."""

    rank: int
    world_size: int
    devices: dict[str, DeviceInfo] = field(default_factory=dict)
    config: TimelineExportConfig = field(default_factory=TimelineExportConfig)


class TimelineExport(Protocol):
    """One logger's writer of a rank's time line. Every call may raise: the monitor then drops the writer, warns
    once, and training goes on."""

    #: ``mlflow``, ``tensorboard``, ``csv``, ``neptune``, ``wandb``
    kind: str

    def write(self, points: list[dict[str, Any]]) -> None:
        """Points the monitor has not handed over before, in time order."""

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        """After the end-of-fit diagnosis (rank 0): ``device -> verdict``, and files worth keeping by name
        (``diagnosis.json``, ``dashboard``)."""

    def close(self) -> None:
        """At the end of fit, after the last :meth:`write` (every rank)."""
