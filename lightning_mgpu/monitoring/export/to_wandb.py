"""The time line into Weights & Biases (Lightning's ``WandbLogger``), under W&B's own GPU names, a run per process.

W&B's system monitor samples every 15 s and names a GPU ``gpu.{i}.<field>``: ``gpu`` (utilisation %),
``memoryAllocatedBytes``, ``memoryAllocated`` (% of the total), ``powerWatts``, ``powerPercent`` (of the enforced
limit), ``temp``, ``smClock``, ``unCorrectedMemoryErrors``, with ``i`` the NVML (physical) index. This writes the
monitor's samples under those names, at the monitor's resolution (``sample_interval_s``), one history row per sample
stamped with its wall time (W&B's ``_timestamp``, so its "Wall Time" and "Relative Time" axes are the samples' own).
What W&B has no name for goes under the prefix, with the monitor's key (``timeline/cpu/rank0/util_pct``,
``timeline/time/rank0/data_wait_pct``, ``timeline/gpu/rank0/energy_j``), beside ``timeline/step`` (optimizer steps
done), ``timeline/phase`` (:data:`~lightning_mgpu.monitoring.export.base.PHASE_CODES`) and, where a phase starts,
``timeline/phase_change`` (its name).

**The x axis.** Lightning's ``WandbLogger`` defines ``*`` against ``trainer/global_step`` (``step_sync``), and W&B's
``_step`` counts every ``log`` call of the run. Each key written here is defined explicitly (``define_metric``, which
W&B prefers to a glob) against ``timeline/wall_time``, the sample's wall time in seconds: the time line plots against
its own clock, several samples per optimizer step, and no ``step=`` is ever passed, so ``_step`` stays monotonic with
Lightning's rows in between.

**Ranks.** W&B's pattern for several processes is a run per process, grouped (``wandb.init(group=...)``); its system
metrics are per process too. Rank 0 writes into the logger's run; every other rank opens a run of its own in the same
project, folder and mode, named ``<run name>-rank<R>`` in group ``<the logger's group, else its run id>``
(``TimelineExportConfig(wandb_rank_runs=False)``: rank 0 only). The device map and the phase codes go into each run's
config (``gpu_monitor/...``); the verdicts (rank 0, end of fit) into the summary (``gpu_monitor/verdict/<device>``) and
as tags (``gpu_monitor: <verdict>``); ``diagnosis.json`` into the run's files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_mgpu.monitoring import keys as K
from lightning_mgpu.monitoring.export.base import PHASE_CODES, PHASE_LEGEND, Destination, ExportContext
from lightning_mgpu.monitoring.export.to_mlflow import gpu_index
from lightning_mgpu.monitoring.samplers import GIB
from lightning_mgpu.utilities.imports import require

#: Config, summary and tag names of the monitor in a W&B run.
TAG_PREFIX = "gpu_monitor"
#: W&B's names for the monitor's per-GPU readings (``gpu.{i}.<name>``).
WANDB_GPU_NAMES = {
    K.UTIL_PCT: "gpu",
    K.MEM_USED_GB: "memoryAllocatedBytes",
    K.POWER_W: "powerWatts",
    K.TEMP_C: "temp",
    K.SM_CLOCK_MHZ: "smClock",
    K.ECC_ERRORS: "unCorrectedMemoryErrors",
}
#: W&B tags hold 64 characters at most.
_TAG_MAX = 64


def to_wandb_values(values: dict[str, float], context: ExportContext, prefix: str) -> dict[str, float]:
    """One point's values under W&B's names (``gpu/rank0/util_pct`` -> ``gpu.3.gpu``, ...) and the rest under
    ``prefix``.

    Example::

        >>> ctx = ExportContext(rank=0, world_size=1, devices={"rank0": DeviceInfo("rank0", 0, 3, None, 300.0)})
        >>> to_wandb_values({"gpu/rank0/util_pct": 97.0, "gpu/rank0/power_w": 150.0}, ctx, "timeline")
        {'gpu.3.gpu': 97.0, 'gpu.3.powerWatts': 150.0, 'gpu.3.powerPercent': 50.0}
    """
    out: dict[str, float] = {}
    for key, value in values.items():
        group, label, name = K.parse_metric_key(key) or ("", None, "")
        if group != K.GPU or label is None or (name not in WANDB_GPU_NAMES and name != K.MEM_TOTAL_GB):
            out[f"{prefix}/{key}"] = value  # not a reading W&B names: ours, under the prefix
            continue
        info = context.devices.get(label)
        gpu = f"gpu.{gpu_index(info, label)}"
        if name == K.MEM_TOTAL_GB:
            continue  # only a denominator: W&B logs no total over time
        if name == K.MEM_USED_GB:
            out[f"{gpu}.memoryAllocatedBytes"] = value * GIB
            total = values.get(K.metric_key(K.GPU, label, K.MEM_TOTAL_GB))
            if total:
                out[f"{gpu}.memoryAllocated"] = 100.0 * value / total
            continue
        out[f"{gpu}.{WANDB_GPU_NAMES[name]}"] = value
        if name == K.POWER_W and info is not None and info.power_limit_w:
            out[f"{gpu}.powerPercent"] = 100.0 * value / info.power_limit_w
    return out


def wandb_destination(index: int, run: Any) -> Destination | None:
    """Where rank 0's W&B run is, for the other ranks to open theirs beside it (``None`` for a disabled run)."""
    settings = getattr(run, "settings", None)
    mode = str(getattr(settings, "mode", "") or "")
    if not run.id or mode == "disabled":
        return None
    options = {
        "project": run.project or "",
        "entity": run.entity or "",
        "group": run.group or run.id,
        "name": run.name or run.id,
        "mode": "offline" if mode in ("offline", "dryrun") else "online",
    }
    return Destination("wandb", index, str(getattr(settings, "root_dir", "") or ""), run.id, tuple(options.items()))


def open_rank_run(destination: Destination, context: ExportContext) -> Any:
    """A run of its own for rank ``context.rank`` (> 0), beside rank 0's: same project, folder and mode, in its
    group. ``reinit="create_new"``: the process's ``wandb.run`` (the user's, if any) is left alone."""
    wandb = require("wandb", "GPUUtilizationMonitor's time line in W&B")
    options = dict(destination.options)
    return wandb.init(
        project=options.get("project") or None,
        entity=options.get("entity") or None,
        group=options.get("group") or destination.run_id,
        name=f"{options.get('name') or destination.run_id}-rank{context.rank}",
        job_type="rank",
        dir=destination.where or None,
        mode=options.get("mode", "offline"),
        config={f"{TAG_PREFIX}/rank": context.rank, f"{TAG_PREFIX}/rank0_run": destination.run_id},
        reinit="create_new",
        settings=wandb.Settings(console="off"),  # the rank's output stays where Lightning sends it
    )


class WandbTimelineExport:
    """A rank's time line into one W&B run: the logger's (rank 0) or its own (``owns_run``, the other ranks)."""

    kind = "wandb"

    def __init__(self, run: Any, context: ExportContext, owns_run: bool = False) -> None:
        self.run = run
        self.context = context
        self.owns_run = owns_run
        self.prefix = context.config.prefix
        self.x_axis = f"{self.prefix}/wall_time"
        self._defined: set[str] = set()
        self.run.define_metric(self.x_axis, hidden=True)
        config: dict[str, Any] = {
            f"{TAG_PREFIX}/devices/rank{context.rank}": "; ".join(
                f"{label}: {info.describe()}" for label, info in sorted(context.devices.items())
            )
            or "cpu",
            f"{TAG_PREFIX}/phase_codes": PHASE_LEGEND,
            f"{TAG_PREFIX}/gpu_names": "gpu.<NVML index>.*: NVML's (physical) index, as W&B's system metrics",
        }
        self.run.config.update(config, allow_val_change=True)

    def _define(self, keys: Any) -> None:
        # Explicitly, key by key: W&B takes a metric's own definition over the logger's "*" glob.
        for key in keys:
            if key not in self._defined and key not in (self.x_axis, "_timestamp"):
                self.run.define_metric(key, step_metric=self.x_axis)
                self._defined.add(key)

    def rows(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One W&B history row per point."""
        out = []
        for point in points:
            t, phase = float(point["t"]), str(point.get("phase"))
            row: dict[str, Any] = to_wandb_values(point.get("values", {}), self.context, self.prefix)
            row[f"{self.prefix}/step"] = int(point.get("step", 0))
            row[f"{self.prefix}/phase"] = PHASE_CODES.get(phase, -1)
            if point.get("mark"):
                row[f"{self.prefix}/phase_change"] = phase
            row[self.x_axis] = t
            row["_timestamp"] = t  # W&B's own wall time of the row: the sample's, not the flush's
            out.append(row)
        return out

    def write(self, points: list[dict[str, Any]]) -> None:
        for row in self.rows(points):
            self._define(row)
            self.run.log(row)  # no step=: W&B's _step stays monotonic, beside Lightning's rows

    def finish(self, verdicts: dict[str, str], files: dict[str, str]) -> None:
        if verdicts:
            for device, verdict in verdicts.items():
                self.run.summary[f"{TAG_PREFIX}/verdict/{device}"] = verdict
            self.run.summary[f"{TAG_PREFIX}/verdict"] = ", ".join(f"{d}: {v}" for d, v in sorted(verdicts.items()))
            tags = [f"{TAG_PREFIX}: {v}"[:_TAG_MAX] for v in sorted(set(verdicts.values()))]
            self.run.tags = tuple(dict.fromkeys([*(self.run.tags or ()), *tags]))
        for name, path in files.items():
            if Path(path).is_file():  # diagnosis.json; a dashboard folder stays beside the monitor's files
                self.run.save(str(path), base_path=str(Path(path).parent), policy="now")

    def close(self) -> None:
        if self.owns_run:
            self.run.finish()  # a rank's own run; the logger's (rank 0) is the logger's to end
