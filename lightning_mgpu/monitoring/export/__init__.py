"""The monitor's time line into the loggers the Trainer has: one small writer per logger, chosen automatically.

:class:`~lightning_mgpu.monitoring.GPUUtilizationMonitor` logs its window means through every logger already; its time
line (every sample, per device, with the phase) went only to its own files and the bundle's ``NeptuneLogger``. Here
each logger of the Trainer that has a writer gets the time line under its own names (docs/monitoring.md has the
tables):

========================  ==============================================================================
Lightning logger          what it gets (:mod:`to_mlflow`, :mod:`to_tensorboard`, :mod:`to_csv`, :mod:`to_wandb`, ...)
========================  ==============================================================================
``MLFlowLogger``          ``system/[rank{R}/]gpu_{i}_utilization_percentage`` ... (MLflow's names, NVML's
                          ``i``), the rest under ``timeline/``, verdicts as tags, diagnosis and dashboard as
                          artifacts
``TensorBoardLogger``     a run per rank, ``<version>/timeline/rank<R>``: the monitor's keys as scalars at
                          wall time, the phase as text
``CSVLogger``             ``timeline_rank<R>.csv`` (and ``_devices.csv``) beside ``metrics.csv``
``WandbLogger``           ``gpu.{i}.gpu`` ... (W&B's names, NVML's ``i``) against the samples' wall time, the
                          rest under ``timeline/``; rank 0 in the logger's run, each other rank in a run of
                          its own in the logger's group; verdicts in the summary and tags
bundle ``NeptuneLogger``  rank 0's points under ``monitoring/timeline/``
========================  ==============================================================================

Every rank writes its own points: rank 0 says where (:func:`destinations`, broadcast once at setup) and each rank
opens its writers (:func:`open_exports`). A writer that fails is dropped with one warning; training goes on.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger

from lightning_mgpu.monitoring.export.base import (
    PHASE_CODES,
    PHASE_LEGEND,
    Destination,
    DeviceInfo,
    ExportContext,
    TimelineExport,
    TimelineExportConfig,
)
from lightning_mgpu.monitoring.export.to_csv import CsvTimelineExport, csv_devices_path, csv_timeline_path
from lightning_mgpu.monitoring.export.to_mlflow import MlflowTimelineExport, to_mlflow_values
from lightning_mgpu.monitoring.export.to_neptune import TIMELINE_PREFIX, NeptuneTimelineExport
from lightning_mgpu.monitoring.export.to_tensorboard import TensorBoardTimelineExport, tensorboard_run_dir
from lightning_mgpu.monitoring.export.to_wandb import (
    WandbTimelineExport,
    open_rank_run,
    to_wandb_values,
    wandb_destination,
)

__all__ = [
    "PHASE_CODES",
    "PHASE_LEGEND",
    "TIMELINE_PREFIX",
    "CsvTimelineExport",
    "Destination",
    "DeviceInfo",
    "ExportContext",
    "MlflowTimelineExport",
    "NeptuneTimelineExport",
    "TensorBoardTimelineExport",
    "TimelineExport",
    "TimelineExportConfig",
    "WandbTimelineExport",
    "csv_devices_path",
    "csv_timeline_path",
    "destinations",
    "open_exports",
    "tensorboard_run_dir",
    "to_mlflow_values",
    "to_wandb_values",
]


def _is_bundle_neptune(logger: Logger) -> bool:
    # By name: monitoring sits below loggers in the layout and never imports them.
    return type(logger).__name__ == "NeptuneLogger" and type(logger).__module__.startswith("lightning_mgpu")


def destinations(loggers: Sequence[Logger], config: TimelineExportConfig) -> list[Destination]:
    """Where each logger keeps its run, for the loggers that have a writer (rank 0: the loggers are open there).

    A logger of another kind (Comet, ...) is left out: it still gets the window means.
    """
    found: list[Destination] = []
    for index, logger in enumerate(loggers):
        try:
            destination = _destination(index, logger, config)
        except Exception as err:  # noqa: BLE001  (rank 0 must reach the broadcast: the other ranks wait there)
            warnings.warn(f"GPUUtilizationMonitor: the time line does not go to {type(logger).__name__} ({err})")
            continue
        if destination is not None:
            found.append(destination)
    return found


def _destination(index: int, logger: Logger, config: TimelineExportConfig) -> Destination | None:
    # One branch per logger kind; a subclass of Lightning's logger writes where its base does.
    if isinstance(logger, MLFlowLogger) and config.mlflow:
        client = logger.experiment  # opens (or resumes) the run now, as the first log_metrics would
        return Destination("mlflow", index, str(client.tracking_uri), logger.run_id) if logger.run_id else None
    if isinstance(logger, TensorBoardLogger) and config.tensorboard:
        return Destination("tensorboard", index, str(logger.log_dir))
    if isinstance(logger, CSVLogger) and config.csv:
        return Destination("csv", index, str(logger.log_dir))
    if _is_bundle_neptune(logger) and config.neptune:
        return Destination("neptune", index)
    if isinstance(logger, WandbLogger) and config.wandb:
        return wandb_destination(index, logger.experiment)  # opens (or resumes) the run now, as Lightning would
    return None


def _open(destination: Destination, logger: Logger, context: ExportContext) -> TimelineExport | None:
    if destination.kind == "mlflow" and destination.run_id is not None:
        return MlflowTimelineExport(destination.where, destination.run_id, context)
    if destination.kind == "tensorboard":
        return TensorBoardTimelineExport(destination.where, context)
    if destination.kind == "csv":
        return CsvTimelineExport(destination.where, context)
    if destination.kind == "neptune" and context.rank == 0:
        # Only rank 0's logger holds a run (the bundle's NeptuneLogger opens none on other ranks).
        run = logger.experiment  # type: ignore[attr-defined]  # the bundle's NeptuneLogger (by name, above)
        return NeptuneTimelineExport(run, context)
    if destination.kind == "wandb" and isinstance(logger, WandbLogger):
        if context.rank == 0:
            return WandbTimelineExport(logger.experiment, context)  # the logger's run
        if context.config.wandb_rank_runs:
            # W&B's pattern for several processes: a run per process, in one group (the logger has none here).
            return WandbTimelineExport(open_rank_run(destination, context), context, owns_run=True)
    return None


def open_exports(
    found: Sequence[Destination], loggers: Sequence[Logger], context: ExportContext
) -> list[TimelineExport]:
    """This rank's writers for ``found`` (the same list on every rank). One that cannot open is left out with a
    warning naming it (a missing package names its extra)."""
    exports: list[TimelineExport] = []
    for destination in found:
        try:
            export = _open(destination, loggers[destination.logger_index], context)
        except Exception as err:  # noqa: BLE001  (a logger's store that cannot be reached must not stop training)
            # Said on every rank: each opens its own writer, and one rank may fail alone.
            warnings.warn(
                f"GPUUtilizationMonitor (rank {context.rank}): the time line does not go to {destination.kind} ({err})",
                stacklevel=2,
            )
            continue
        if export is not None:
            exports.append(export)
    return exports
