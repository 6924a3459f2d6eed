"""Read a finished (or running) training run from disk for the dashboard.

Three kinds of run folder are understood, one per Lightning logger a user already has:

* a **CSV-logger folder** (``CSVLogger(save_dir, name)`` writes ``save_dir/name/version_N/``):
  ``metrics.csv``, ``hparams.yaml`` and, with the GPU monitor, ``diagnosis.json``;
* a **TensorBoard folder** (``TensorBoardLogger(save_dir, name)`` writes ``save_dir/name/version_N/``):
  ``events.out.tfevents.*`` (read with TensorBoard's ``EventAccumulator``), ``hparams.yaml`` and
  ``diagnosis.json``;
* a **Neptune offline run folder** (``NeptuneLogger(mode="offline")`` writes
  ``.neptune/offline/run__<id>__<pid>__<key>/``): ``data-N.log`` files of JSON operations and
  ``metadata.json``.

A parent folder holding several runs (``save_dir/name`` with ``version_*``, or a ``.neptune`` /
``.neptune/offline`` folder) resolves to its newest run.

All read into the same :class:`RunData`: series keyed by the name the metric was logged under
(``train_loss``, ``gpu/rank1/util_pct``), hyperparameters flattened with ``/``.

Example::

    run = read_run("outputs/logs/version_0")
    run.series["val_acc"][-1]  # (step, value)
    run.last_values()["gpu/rank0/util_pct"]
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_mgpu.loggers.neptune_layout import (
    DEFAULT_PREFIX,
    DIAGNOSIS_FILE,
    DIAGNOSIS_KEY,
    HYPERPARAMS_KEY,
    MONITORING_NAMESPACE,
    MONITORING_RECORD_PATH,
    PREFIX_RECORD_PATH,
    STATUS_KEY,
    from_neptune_path,
)

CSV_KIND = "csv"
TENSORBOARD_KIND = "tensorboard"
NEPTUNE_KIND = "neptune-offline"
_DATA_LOG_RE = re.compile(r"^data-(\d+)\.log$")
_VERSION_RE = re.compile(r"^version_(\d+)$")
_NEPTUNE_HASH_RE = re.compile(r"^[0-9a-f]{8}$")

Point = tuple[float, float]


class RunFormatError(ValueError):
    """The folder is neither a CSV-logger folder nor a Neptune offline run folder."""


@dataclass
class RunData:
    """One run, whatever logger wrote it.

    Attributes:
        kind: :data:`CSV_KIND` or :data:`NEPTUNE_KIND`.
        path: the run folder that was read.
        series: logged key -> ``[(step, value), ...]`` sorted by step.
        hparams: hyperparameters, nested keys joined with ``/``.
        info: facts to show (run id, name, created, status, checkpoint paths, ...).
        diagnosis_path: the monitor's ``diagnosis.json`` if the folder has one.
        diagnosis_text: the same document recorded inside a Neptune run (``{prefix}/diagnosis``).
        model_summary: Lightning's model summary text, if the run recorded it.
        notes: how the folder was resolved and anything skipped while reading.
    """

    kind: str
    path: Path
    series: dict[str, list[Point]] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)
    diagnosis_path: Path | None = None
    diagnosis_text: str | None = None
    model_summary: str | None = None
    notes: list[str] = field(default_factory=list)
    #: The monitor's time lines (``timeline/rank<R>.jsonl``), by rank: points at wall time with their phase.
    timelines: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: The monitor's run context from ``diagnosis.json`` (strategy, precision, world size, ...), when it has one.
    context: dict[str, Any] = field(default_factory=dict)

    def last_values(self) -> dict[str, float]:
        """The last logged value of every series."""
        return {k: pts[-1][1] for k, pts in self.series.items() if pts}


# ---------------------------------------------------------------------------- locating


def _is_csv_run(path: Path) -> bool:
    return (path / "metrics.csv").is_file()


def _is_tensorboard_run(path: Path) -> bool:
    return any(path.glob("events.out.tfevents.*"))


def _is_logger_run(path: Path) -> str | None:
    """The kind of a Lightning logger's version folder, or ``None``."""
    if _is_csv_run(path):
        return CSV_KIND
    if _is_tensorboard_run(path):
        return TENSORBOARD_KIND
    return None


def _is_neptune_run(path: Path) -> bool:
    return any(_DATA_LOG_RE.match(p.name) for p in path.glob("data-*.log"))


def _newest(candidates: list[Path], key: Any) -> Path | None:
    return max(candidates, key=key) if candidates else None


def _neptune_created(run_dir: Path) -> tuple[str, float]:
    try:
        created = str(json.loads((run_dir / "metadata.json").read_text()).get("createdAt", ""))
    except (OSError, ValueError):
        created = ""
    return created, run_dir.stat().st_mtime


def locate_run(path: str | os.PathLike) -> tuple[str, Path, list[str]]:
    """Find the run inside ``path``: ``(kind, run folder, notes)``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        RunFormatError: no CSV-logger or Neptune offline run in or at ``path``.
    """
    given = root = Path(path).expanduser()
    if not root.exists():
        raise FileNotFoundError(
            f"RUN {str(root)!r} does not exist: pass a CSV-logger folder, a TensorBoard log folder or a Neptune"
            " offline run folder"
        )
    if root.is_file():
        root = root.parent  # metrics.csv or an events file names its run folder
    kind = _is_logger_run(root)
    if kind is not None:
        return kind, root, []
    if _is_neptune_run(root):
        return NEPTUNE_KIND, root, []
    versions = [p for p in root.iterdir() if p.is_dir() and _VERSION_RE.match(p.name) and _is_logger_run(p)]
    newest = _newest(versions, key=lambda p: int(_VERSION_RE.match(p.name).group(1)))  # type: ignore[union-attr]
    if newest is not None:
        kind = _is_logger_run(newest)
        assert kind is not None  # chosen among logger runs
        label = "CSV-logger" if kind == CSV_KIND else "TensorBoard"
        return kind, newest, [f"{root} holds {len(versions)} {label} run(s); showing the newest, {newest.name}"]
    for offline in (root, root / "offline", root / ".neptune" / "offline"):
        runs = [p for p in offline.glob("run__*") if p.is_dir() and _is_neptune_run(p)] if offline.is_dir() else []
        newest = _newest(runs, key=_neptune_created)
        if newest is not None:
            return (
                NEPTUNE_KIND,
                newest,
                [f"{offline} holds {len(runs)} Neptune offline run(s); showing the newest, {newest.name}"],
            )
    found = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())[:12]
    where = f"RUN {str(given)!r}" + (f" (a file; its folder {str(root)!r})" if given != root else "")
    raise RunFormatError(
        f"{where} is neither a CSV-logger folder (expected metrics.csv, with hparams.yaml and maybe diagnosis.json,"
        " e.g. outputs/logs/version_0 from CSVLogger), nor a TensorBoard folder (expected events.out.tfevents.*, e.g."
        " tb_logs/name/version_0 from TensorBoardLogger), nor a Neptune offline run folder (expected data-1.log and"
        " metadata.json, e.g. .neptune/offline/run__<id>__... from NeptuneLogger(mode='offline')); "
        f"it contains: {', '.join(found) if found else 'nothing'}"
    )


def read_run(path: str | os.PathLike) -> RunData:
    """Read the run at (or newest run under) ``path``; see :func:`locate_run` for what is accepted.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        RunFormatError: ``path`` is neither kind of run folder.
    """
    kind, run_dir, notes = locate_run(path)
    readers = {CSV_KIND: read_csv_run, TENSORBOARD_KIND: read_tensorboard_run, NEPTUNE_KIND: read_neptune_offline_run}
    run = readers[kind](run_dir)
    run.notes[:0] = notes
    _read_monitor_files(run, run_dir)
    return run


def _read_monitor_files(run: RunData, run_dir: Path) -> None:
    """The monitor's time lines and run context, written beside the logger's files."""
    from lightning_mgpu.monitoring.timeline import TIMELINE_DIR, read_timeline

    folder = run_dir / TIMELINE_DIR
    for path in sorted(folder.glob("rank*.jsonl")) if folder.is_dir() else []:
        try:
            rank = int(path.stem[len("rank") :])
            run.timelines[rank] = read_timeline(path)
        except (OSError, ValueError) as err:
            run.notes.append(f"skipped {path.name} ({err})")
    text = run.diagnosis_text
    if text is None and run.diagnosis_path is not None:
        with contextlib.suppress(OSError):
            text = run.diagnosis_path.read_text()
    if text:
        with contextlib.suppress(ValueError, AttributeError):
            run.context = dict(json.loads(text).get("context") or {})


# ---------------------------------------------------------------------------- CSV logger


def _float(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _flatten(data: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, full))
        else:
            out[full] = value
    return out


def _load_yaml(path: Path) -> dict[str, Any]:
    """``hparams.yaml`` may hold Python-tagged objects (``!!python/object``); show those as text, never run them."""
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    def _as_text(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> str:
        return f"<{node.tag}>"

    _Loader.add_multi_constructor("", _as_text)
    data = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    return _flatten(data) if isinstance(data, Mapping) else {}


def _sorted_series(series: dict[str, list[Point]]) -> dict[str, list[Point]]:
    return {k: sorted(v, key=lambda p: p[0]) for k, v in series.items() if v}


def read_csv_run(run_dir: Path) -> RunData:
    """Read a CSVLogger version folder."""
    run = RunData(kind=CSV_KIND, path=run_dir.resolve())
    series: dict[str, list[Point]] = {}
    with open(run_dir / "metrics.csv", newline="") as f:
        reader = csv.DictReader(f)
        for i, row in enumerate(reader):
            step = _float(row.get("step"))
            x = step if step is not None else float(i)
            for key, text in row.items():
                if key in (None, "step") or text in (None, ""):
                    continue
                value = _float(text)
                if value is not None:
                    series.setdefault(key, []).append((x, value))
    run.series = _sorted_series(series)
    _read_version_folder_extras(run, run_dir)
    run.info = {"run": run_dir.name, "logger": "CSVLogger", "folder": str(run.path)}
    return run


def _read_version_folder_extras(run: RunData, run_dir: Path) -> None:
    """``hparams.yaml`` and the GPU monitor's ``diagnosis.json``, which Lightning's loggers keep beside the metrics."""
    hparams = run_dir / "hparams.yaml"
    if hparams.is_file():
        try:
            run.hparams = _load_yaml(hparams)
        except Exception as err:  # a broken hparams file must not hide the metrics
            run.notes.append(f"could not read {hparams.name}: {err}")
    if (run_dir / DIAGNOSIS_FILE).is_file():
        run.diagnosis_path = run_dir / DIAGNOSIS_FILE


# ---------------------------------------------------------------------------- TensorBoard


def read_tensorboard_run(run_dir: Path) -> RunData:
    """Read a TensorBoardLogger version folder: every scalar tag of its event files.

    Raises:
        MissingDependencyError: tensorboard is not installed (the ``dashboard`` extra).
    """
    from lightning_mgpu.utilities.imports import require

    accumulator_module = require("tensorboard.backend.event_processing.event_accumulator", "reading TensorBoard runs")
    run = RunData(kind=TENSORBOARD_KIND, path=run_dir.resolve())
    # size_guidance 0: keep every scalar (the default samples 10,000 per tag); read nothing else.
    accumulator = accumulator_module.EventAccumulator(str(run_dir), size_guidance={accumulator_module.SCALARS: 0})
    accumulator.Reload()
    series: dict[str, list[Point]] = {}
    for tag in accumulator.Tags().get("scalars", []):
        points = [(float(e.step), float(e.value)) for e in accumulator.Scalars(tag) if math.isfinite(e.value)]
        if points:
            series[tag] = points
    run.series = _sorted_series(series)
    _read_version_folder_extras(run, run_dir)
    run.info = {"run": run_dir.name, "logger": "TensorBoardLogger", "folder": str(run.path)}
    return run


# ---------------------------------------------------------------------------- Neptune offline


def _operations(run_dir: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    logs = sorted(
        (p for p in run_dir.glob("data-*.log") if _DATA_LOG_RE.match(p.name)),
        key=lambda p: int(_DATA_LOG_RE.match(p.name).group(1)),  # type: ignore[union-attr]
    )
    skipped = 0
    for log in logs:
        with open(log, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    op = json.loads(line)["obj"]
                except (ValueError, KeyError, TypeError):
                    skipped += 1  # e.g. a line cut short by a crash
                    continue
                if isinstance(op, dict):
                    yield op
    if skipped:
        notes.append(f"skipped {skipped} unreadable line(s) in {', '.join(p.name for p in logs)}")


def _replay(
    run_dir: Path, notes: list[str]
) -> tuple[dict[str, list[Point]], dict[str, Any], dict[str, dict[str, Any]]]:
    """Apply the operation log: float series, assigned values, uploaded files (by path)."""
    series: dict[str, list[Point]] = {}
    values: dict[str, Any] = {}
    files: dict[str, dict[str, Any]] = {}
    for op in _operations(run_dir, notes):
        kind, path = op.get("type", ""), "/".join(map(str, op.get("path", [])))
        if kind == "LogFloats":
            points = series.setdefault(path, [])
            for item in op.get("values", []):
                value = _float(item.get("value"))
                step = _float(item.get("step"))
                if value is not None:
                    points.append((step if step is not None else float(len(points)), value))
        elif kind == "ClearFloatLog":
            series[path] = []
        elif kind.startswith("Assign"):
            values[path] = op.get("value")
        elif kind == "UploadFile":
            files[path] = op
        elif kind == "DeleteAttribute":
            for store in (series, values, files):
                for key in [k for k in store if k == path or k.startswith(path + "/")]:
                    del store[key]
    return series, values, files


def _uploaded_text(run_dir: Path, op: Mapping[str, Any]) -> str | None:
    candidates = []
    if op.get("tmp_file_name"):
        candidates.append(run_dir / "upload_path" / str(op["tmp_file_name"]))
    if op.get("file_path"):
        candidates.append(Path(str(op["file_path"])))
    for candidate in candidates:
        try:
            return candidate.read_text(errors="replace")
        except OSError:
            continue
    return None


def read_neptune_offline_run(run_dir: Path) -> RunData:
    """Read a Neptune offline run folder written by :class:`~lightning_mgpu.loggers.NeptuneLogger` (or any Neptune 1.x
    client)."""
    run = RunData(kind=NEPTUNE_KIND, path=run_dir.resolve())
    series, values, files = _replay(run_dir, run.notes)
    prefix = str(values.get(PREFIX_RECORD_PATH, DEFAULT_PREFIX))
    monitoring = str(values.get(MONITORING_RECORD_PATH, MONITORING_NAMESPACE))
    out: dict[str, list[Point]] = {}
    for path, points in series.items():
        key = from_neptune_path(path, prefix, monitoring)
        if key is None:
            head = path.split("/")
            # Neptune's own hardware monitoring (monitoring/<hash>/...) and sys/ are not training metrics.
            if head[0] == "sys" or (head[0] == monitoring and len(head) > 1 and _NEPTUNE_HASH_RE.match(head[1])):
                continue
            key = path  # logged through logger.experiment[...] directly: show it under its own path
        out.setdefault(key, []).extend(points)
    run.series = _sorted_series(out)
    hp_ns = "/".join(p for p in (prefix, HYPERPARAMS_KEY) if p) + "/"
    run.hparams = {k[len(hp_ns) :]: v for k, v in values.items() if k.startswith(hp_ns)}
    model_ns = "/".join(p for p in (prefix, "model") if p) + "/"
    info = {"run": run_dir.name, "logger": "NeptuneLogger (offline)", "folder": str(run.path)}
    try:
        meta = json.loads((run_dir / "metadata.json").read_text())
        info.update({"id": str(meta.get("containerId", "")), "created": str(meta.get("createdAt", ""))})
    except (OSError, ValueError):
        run.notes.append("metadata.json is missing or unreadable")
    for label, path in (("name", "sys/name"), ("description", "sys/description")):
        if values.get(path):
            info[label] = str(values[path])
    diagnosis = files.get("/".join(p for p in (prefix, DIAGNOSIS_KEY) if p))
    if diagnosis is not None:
        run.diagnosis_text = _uploaded_text(run_dir, diagnosis)
    status = values.get("/".join(p for p in (prefix, STATUS_KEY) if p))
    if status:
        info["status"] = str(status)
    for key, value in values.items():
        if key.startswith(model_ns) and value not in (None, ""):
            info[key[len(model_ns) :]] = str(value)
    run.info = info
    summary = files.get(model_ns + "summary")
    if summary is not None:
        run.model_summary = _uploaded_text(run_dir, summary)
    if (run_dir / DIAGNOSIS_FILE).is_file():
        run.diagnosis_path = run_dir / DIAGNOSIS_FILE
    return run
