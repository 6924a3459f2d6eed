"""Where :class:`~lightning_mgpu.loggers.NeptuneLogger` puts each logged key in a Neptune run.

Pure functions with no dependency on ``neptune``: the logger uses :func:`to_neptune_path` to write,
and the dashboard's run reader uses :func:`from_neptune_path` to map a stored path back to the key
that was logged.

Layout:

==================================  ==========================================
logged key                          Neptune path
==================================  ==========================================
``gpu/rank1/util_pct``              ``monitoring/rank1/gpu/util_pct``
``time/rank0_dev1/data_wait_pct``   ``monitoring/rank0_dev1/time/data_wait_pct``
``throughput/samples_per_sec``      ``monitoring/throughput/samples_per_sec``
``train_loss``                      ``training/train_loss`` (``{prefix}/{key}``)
hyperparameters                     ``training/hyperparams/...``
checkpoint paths, model summary     ``training/model/...``
the monitor's diagnosis.json        ``training/diagnosis`` (JSON text)
==================================  ==========================================

The GPU monitor's per-device keys are regrouped by device so that one rank's gauges sit together
in Neptune's UI. Neptune's own hardware monitoring (off by default here) writes under
``monitoring/<8-hex-digit hash>/``, which never collides with a ``rank...`` label or a group name.

Example::

    >>> to_neptune_path("gpu/rank1/util_pct")
    'monitoring/rank1/gpu/util_pct'
    >>> to_neptune_path("val_acc", prefix="training")
    'training/val_acc'
    >>> from_neptune_path("monitoring/rank1/gpu/util_pct")
    'gpu/rank1/util_pct'
    >>> from_neptune_path("training/val_acc", prefix="training")
    'val_acc'
"""

from __future__ import annotations

from lightning_mgpu.monitoring.keys import (
    GLOBAL_NAMES,
    GROUPS,
    parse_device_label,
    parse_metric_key,
)

DEFAULT_PREFIX = "training"
MONITORING_NAMESPACE = "monitoring"
HYPERPARAMS_KEY = "hyperparams"
STATUS_KEY = "status"
#: The GPU monitor's diagnosis (its ``diagnosis.json`` text), recorded by the logger at the end of fit.
DIAGNOSIS_KEY = "diagnosis"
DIAGNOSIS_FILE = "diagnosis.json"
#: The logger records its metrics prefix here so a reader can undo it without guessing.
PREFIX_RECORD_PATH = "lightning_mgpu/metrics_prefix"
MONITORING_RECORD_PATH = "lightning_mgpu/monitoring_namespace"
#: Integration version keys (the first is the one Lightning's own NeptuneLogger used).
LIGHTNING_VERSION_PATH = "source_code/integrations/pytorch-lightning"
BUNDLE_VERSION_PATH = "source_code/integrations/lightning_mgpu"


def _join(*parts: str) -> str:
    return "/".join(p for p in parts if p)


def is_monitor_key(key: str) -> bool:
    """Whether ``key`` is one of the GPU monitor's keys (per device, or an all-rank throughput key)."""
    parsed = parse_metric_key(key)
    if parsed is None:
        return False
    group, device, name = parsed
    # Two-part keys such as ``time/epoch`` are only the monitor's when the schema lists them.
    return device is not None or name in GLOBAL_NAMES.get(group, ())


def to_neptune_path(key: str, prefix: str = DEFAULT_PREFIX, monitoring: str = MONITORING_NAMESPACE) -> str:
    """The Neptune path that a logged metric ``key`` is written to.

    Args:
        key: the key as passed to ``log_metrics`` (``"train_loss"``, ``"gpu/rank1/util_pct"``).
        prefix: the namespace of ordinary metrics; ``""`` for none.
        monitoring: the namespace of the GPU monitor's metrics.
    """
    if is_monitor_key(key):
        group, device, name = parse_metric_key(key)  # type: ignore[misc]
        return _join(monitoring, device or "", group, name)
    return _join(prefix, key)


def from_neptune_path(path: str, prefix: str = DEFAULT_PREFIX, monitoring: str = MONITORING_NAMESPACE) -> str | None:
    """Undo :func:`to_neptune_path`: the logged key for a stored ``path``, or ``None`` if it is not a metric.

    Paths outside ``prefix`` and ``monitoring`` (``sys/...``, Neptune's own ``monitoring/<hash>/...``)
    return ``None``. Call it on metric series only: the logger's hyperparameter and model records
    also live under ``prefix``.
    """
    parts = path.split("/")
    if monitoring and parts[0] == monitoring:
        rest = parts[1:]
        if len(rest) == 3 and parse_device_label(rest[0]) is not None and rest[1] in GROUPS:
            return f"{rest[1]}/{rest[0]}/{rest[2]}"
        if len(rest) == 2 and rest[1] in GLOBAL_NAMES.get(rest[0], ()):
            return f"{rest[0]}/{rest[1]}"
        return None
    if prefix:
        if parts[0] != prefix or len(parts) < 2:
            return None
        parts = parts[1:]
    return "/".join(parts)
