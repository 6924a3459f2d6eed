"""The time line into an MLflow run (Lightning's ``MLFlowLogger``), under MLflow's own system-metric names.

MLflow's system metrics (``mlflow.system_metrics``) name a GPU by its NVML index, every 10 s:
``system/gpu_{i}_utilization_percentage``, ``_memory_usage_percentage``, ``_memory_usage_megabytes``,
``_power_usage_watts``, ``_power_usage_percentage``. This writes the monitor's samples under those names, at the
monitor's resolution (``sample_interval_s``) and with each sample's wall time, so MLflow's "System metrics" charts show
them. Where a run has several ranks the rank goes where MLflow puts a node id: ``system/rank{R}/gpu_{i}_...``
(``i`` stays NVML's index: two ranks of one machine never share one, two machines may). What MLflow has no name for
goes under the prefix (``timeline/cpu/rank0/util_pct``, ``timeline/time/rank0/data_wait_pct``,
``timeline/gpu/rank0/sm_clock_mhz``), with the phase as a number per rank (``timeline/phase/rank0``;
:data:`~lightning_mgpu.monitoring.export.base.PHASE_LEGEND` in the tag ``gpu_monitor.phase_codes``). The verdicts
become tags (``gpu_monitor.verdict.<device>``); ``diagnosis.json`` and a dashboard folder become artifacts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_mgpu.monitoring import keys as K
from lightning_mgpu.monitoring.export.base import PHASE_CODES, PHASE_LEGEND, DeviceInfo, ExportContext
from lightning_mgpu.monitoring.samplers import GIB
from lightning_mgpu.utilities.imports import require

#: The run's tags and artifacts of the monitor go under this (MLflow tag names allow dots).
TAG_PREFIX = "gpu_monitor"


def system_prefix(rank: int, with_rank: bool) -> str:
    """``system/``, or ``system/rank{R}/`` where the rank is part of the name."""
    return f"system/rank{rank}/" if with_rank else "system/"


def gpu_index(info: DeviceInfo | None, label: str) -> int:
    """The ``i`` of ``gpu_{i}``: NVML's index as MLflow uses it; torch's, or the label's, where NVML does not say."""
    if info is not None and info.nvml_index is not None:
        return info.nvml_index
    if info is not None and info.cuda_index is not None:
        return info.cuda_index
    parsed = K.parse_device_label(label)
    return parsed[1] if parsed is not None and parsed[1] is not None else 0


def to_mlflow_values(
    values: dict[str, float], context: ExportContext, with_rank: bool, prefix: str
) -> dict[str, float]:
    """One point's values under MLflow's names (``gpu/rank0/util_pct`` -> ``system/gpu_3_utilization_percentage``,
    ...) and the rest under ``prefix``.

    Example::

        >>> ctx = ExportContext(rank=0, world_size=1, devices={"rank0": DeviceInfo("rank0", 0, 3, None, 300.0)})
        >>> to_mlflow_values({"gpu/rank0/util_pct": 97.0, "gpu/rank0/power_w": 150.0}, ctx, False, "timeline")
        {'system/gpu_3_utilization_percentage': 97.0, 'system/gpu_3_power_usage_watts': 150.0, \
'system/gpu_3_power_usage_percentage': 50.0}
    """
    out: dict[str, float] = {}
    system = system_prefix(context.rank, with_rank)
    for key, value in values.items():
        group, label, name = K.parse_metric_key(key) or ("", None, "")
        if group != K.GPU or label is None:
            out[f"{prefix}/{key}"] = value  # not a per-GPU reading: no MLflow name exists for it
            continue
        info = context.devices.get(label)
        gpu = f"{system}gpu_{gpu_index(info, label)}"
        # Each of MLflow's five names, from the reading it is made of (MLflow's own arithmetic, gpu_monitor.py).
        if name == K.UTIL_PCT:
            out[f"{gpu}_utilization_percentage"] = value
        elif name == K.MEM_USED_GB:
            out[f"{gpu}_memory_usage_megabytes"] = value * GIB / 1e6
            total = values.get(K.metric_key(K.GPU, label, K.MEM_TOTAL_GB))
            if total:
                out[f"{gpu}_memory_usage_percentage"] = round(100.0 * value / total, 1)
        elif name == K.POWER_W:
            out[f"{gpu}_power_usage_watts"] = value
            if info is not None and info.power_limit_w:
                out[f"{gpu}_power_usage_percentage"] = 100.0 * value / info.power_limit_w
        elif name == K.MEM_TOTAL_GB:
            continue  # only a denominator: MLflow logs no total
        else:
            out[f"{prefix}/{key}"] = value  # the SM clock and whatever NVML gives later
    return out


class MlflowTimelineExport:
    """A rank's time line into one MLflow run, through its own ``MlflowClient`` (any rank may write to a run)."""

    kind = "mlflow"

    def __init__(self, tracking_uri: str, run_id: str, context: ExportContext) -> None:
        tracking = require("mlflow.tracking", "GPUUtilizationMonitor's time line in MLflow")
        self._metric = require("mlflow.entities", "GPUUtilizationMonitor's time line in MLflow").Metric
        self.client: Any = tracking.MlflowClient(tracking_uri=tracking_uri)
        self.run_id = run_id
        self.context = context
        config = context.config
        # The rank in the names only where two ranks would otherwise write one series (see TimelineExportConfig).
        self.with_rank = config.rank_in_names if config.rank_in_names is not None else context.world_size > 1
        self.prefix = config.prefix
        tags = {
            f"{TAG_PREFIX}.devices.rank{context.rank}": "; ".join(
                f"{label}: {info.describe()}" for label, info in sorted(context.devices.items())
            )
            or "cpu",
        }
        if context.rank == 0:
            tags[f"{TAG_PREFIX}.phase_codes"] = PHASE_LEGEND
            rank = "rank<R>/" if self.with_rank else ""
            tags[f"{TAG_PREFIX}.gpu_names"] = f"system/{rank}gpu_<NVML index>_*: NVML's (physical) index, as MLflow's"
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, value)

    def write(self, points: list[dict[str, Any]]) -> None:
        metrics = []
        phase_key = f"{self.prefix}/phase/rank{self.context.rank}"
        for point in points:
            ms, step = int(round(float(point["t"]) * 1000)), int(point.get("step", 0))
            values = to_mlflow_values(point.get("values", {}), self.context, self.with_rank, self.prefix)
            values[phase_key] = float(PHASE_CODES.get(str(point.get("phase")), -1))
            metrics += [self._metric(key, float(value), ms, step) for key, value in values.items()]
        batch = self.context.config.mlflow_batch
        for start in range(0, len(metrics), batch):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + batch])

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        for device, verdict in verdicts.items():
            self.client.set_tag(self.run_id, f"{TAG_PREFIX}.verdict.{device}", verdict)
        if verdicts:
            summary = ", ".join(f"{d}: {v}" for d, v in sorted(verdicts.items()))
            self.client.set_tag(self.run_id, f"{TAG_PREFIX}.verdict", summary)
        if not self.context.config.mlflow_artifacts:
            return
        for name, path in files.items():
            # A folder (the dashboard) goes up whole under its name; a file beside the run's other artifacts.
            if Path(path).is_dir():
                self.client.log_artifacts(self.run_id, path, artifact_path=name)
            elif Path(path).is_file():
                self.client.log_artifact(self.run_id, path, artifact_path=TAG_PREFIX)

    def close(self) -> None:
        pass  # every write was synchronous; the client holds nothing open
