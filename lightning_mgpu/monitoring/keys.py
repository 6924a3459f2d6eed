"""The metric key schema of :class:`~lightning_mgpu.callbacks.GPUUtilizationMonitor`.

Every key is ``{group}/{device}/{name}`` or, for values that cover all ranks, ``{group}/{name}``.
The keys are stable: dashboards, the Neptune logger and :mod:`lightning_mgpu.monitoring.diagnosis`
parse them with :func:`parse_metric_key`.

==============  =====================================  ==========================================
group           per-device names                       meaning
==============  =====================================  ==========================================
``gpu``         ``util_pct`` (+ ``_min``/``_max``)      NVML utilisation, % of time a kernel ran
                ``mem_used_gb``, ``mem_total_gb``       device memory (NVML, whole device)
                ``power_w``, ``sm_clock_mhz``           board power, SM clock
                ``temp_c``                              GPU temperature (window maximum)
                ``energy_j``                            energy the board used in the window (NVML's counter)
                ``pcie_tx_mb_s``, ``pcie_rx_mb_s``      PCIe throughput out of / into the GPU
                ``throttle_power_pct``                  % of samples with clocks held back by the power cap
                ``throttle_thermal_pct``                ... by heat (software or hardware thermal slowdown)
                ``throttle_hw_slowdown_pct``            ... by a hardware slowdown (power brake, external signal)
                ``ecc_errors``                          uncorrected ECC errors since the driver loaded
``cpu``         ``util_pct`` (+ ``_min``/``_max``)      process CPU time / (wall x torch threads)
                ``rss_gb``                              resident memory of the training process
``time``        ``data_wait_pct``, ``data_wait_ms``     time waiting for the next batch
                ``step_ms``                             batch start -> batch end (compute)
                ``comm_pct``                            gradient sync share (with accumulation)
                ``synced_step_ms``, ``unsynced_step_ms``  micro-batches with / without grad sync
                ``host_syncs_per_step``                 implicit CUDA syncs (``detect_sync=True``)
``throughput``  ``samples_per_sec``                     samples per second of this device
==============  =====================================  ==========================================

All-rank keys: ``throughput/samples_per_sec`` (sum over devices) and ``throughput/mfu``
(mean model-FLOPs utilisation, only when the FLOPs per sample are known).

The device label is ``rank{r}`` (the global rank). Under ``dp``, where one process drives several
GPUs, it is ``rank0_dev{d}`` with ``d`` the CUDA device index as torch numbers it.

Example::

    >>> metric_key(GPU, device_label(1), UTIL_PCT)
    'gpu/rank1/util_pct'
    >>> parse_metric_key("gpu/rank0_dev1/util_pct")
    ('gpu', 'rank0_dev1', 'util_pct')
    >>> parse_metric_key("throughput/samples_per_sec")
    ('throughput', None, 'samples_per_sec')
    >>> parse_metric_key("train_loss") is None
    True
"""

from __future__ import annotations

import re

# Groups
GPU = "gpu"
CPU = "cpu"
TIME = "time"
THROUGHPUT = "throughput"
GROUPS = (GPU, CPU, TIME, THROUGHPUT)

# Utilisation and memory (groups gpu / cpu)
UTIL_PCT = "util_pct"
UTIL_PCT_MIN = "util_pct_min"
UTIL_PCT_MAX = "util_pct_max"
MEM_USED_GB = "mem_used_gb"
MEM_TOTAL_GB = "mem_total_gb"
POWER_W = "power_w"
SM_CLOCK_MHZ = "sm_clock_mhz"
TEMP_C = "temp_c"
ENERGY_J = "energy_j"
PCIE_TX_MB_S = "pcie_tx_mb_s"
PCIE_RX_MB_S = "pcie_rx_mb_s"
THROTTLE_POWER_PCT = "throttle_power_pct"
THROTTLE_THERMAL_PCT = "throttle_thermal_pct"
THROTTLE_HW_SLOWDOWN_PCT = "throttle_hw_slowdown_pct"
ECC_ERRORS = "ecc_errors"
RSS_GB = "rss_gb"

# Step timing (group time)
DATA_WAIT_PCT = "data_wait_pct"
DATA_WAIT_MS = "data_wait_ms"
STEP_MS = "step_ms"
COMM_PCT = "comm_pct"
SYNCED_STEP_MS = "synced_step_ms"
UNSYNCED_STEP_MS = "unsynced_step_ms"
HOST_SYNCS_PER_STEP = "host_syncs_per_step"

# Throughput (group throughput)
SAMPLES_PER_SEC = "samples_per_sec"
MFU = "mfu"

#: What NVML offers beyond utilisation, memory, power and clock, where the board and driver have it.
GPU_HEALTH_NAMES = (
    TEMP_C,
    ENERGY_J,
    PCIE_TX_MB_S,
    PCIE_RX_MB_S,
    THROTTLE_POWER_PCT,
    THROTTLE_THERMAL_PCT,
    THROTTLE_HW_SLOWDOWN_PCT,
    ECC_ERRORS,
)
GPU_NAMES = (UTIL_PCT, UTIL_PCT_MIN, UTIL_PCT_MAX, MEM_USED_GB, MEM_TOTAL_GB, POWER_W, SM_CLOCK_MHZ, *GPU_HEALTH_NAMES)
CPU_NAMES = (UTIL_PCT, UTIL_PCT_MIN, UTIL_PCT_MAX, RSS_GB)
TIME_NAMES = (DATA_WAIT_PCT, DATA_WAIT_MS, STEP_MS, COMM_PCT, SYNCED_STEP_MS, UNSYNCED_STEP_MS, HOST_SYNCS_PER_STEP)
THROUGHPUT_NAMES = (SAMPLES_PER_SEC,)
GLOBAL_NAMES = {THROUGHPUT: (SAMPLES_PER_SEC, MFU)}
NAMES_BY_GROUP = {GPU: GPU_NAMES, CPU: CPU_NAMES, TIME: TIME_NAMES, THROUGHPUT: THROUGHPUT_NAMES}

_DEVICE_RE = re.compile(r"^rank(\d+)(?:_dev(\d+))?$")


def device_label(rank: int, device_index: int | None = None) -> str:
    """``rank{rank}``, or ``rank{rank}_dev{device_index}`` for one of several devices of a process (``dp``)."""
    if rank < 0 or (device_index is not None and device_index < 0):
        raise ValueError(f"rank and device index must be >= 0, got rank={rank}, device_index={device_index}")
    return f"rank{rank}" if device_index is None else f"rank{rank}_dev{device_index}"


def parse_device_label(label: str) -> tuple[int, int | None] | None:
    """``"rank3"`` -> ``(3, None)``, ``"rank0_dev1"`` -> ``(0, 1)``; anything else -> ``None``."""
    m = _DEVICE_RE.match(label)
    if m is None:
        return None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def metric_key(group: str, device: str | None, name: str) -> str:
    """Build a key: ``{group}/{device}/{name}``, or ``{group}/{name}`` when ``device`` is ``None``.

    Raises:
        ValueError: ``group`` is not one of :data:`GROUPS`, or ``device`` is not a valid label.
    """
    if group not in GROUPS:
        raise ValueError(f"unknown metric group {group!r}; use one of {GROUPS}")
    if device is None:
        return f"{group}/{name}"
    if parse_device_label(device) is None:
        raise ValueError(f"device label {device!r} is not 'rank<r>' or 'rank<r>_dev<d>'; build it with device_label()")
    return f"{group}/{device}/{name}"


def parse_metric_key(key: str) -> tuple[str, str | None, str] | None:
    """Split a monitor key into ``(group, device, name)``; ``device`` is ``None`` for all-rank keys.

    Returns ``None`` for keys that are not the monitor's (e.g. ``train_loss``), so a caller can
    pass every logged key through it.
    """
    parts = key.split("/")
    if not parts or parts[0] not in GROUPS:
        return None
    if len(parts) == 2:
        return (parts[0], None, parts[1]) if parts[1] else None
    if len(parts) == 3 and parts[2] and parse_device_label(parts[1]) is not None:
        return parts[0], parts[1], parts[2]
    return None


def diagnosis_name(group: str, name: str) -> str:
    """The name a per-device metric carries in :func:`lightning_mgpu.monitoring.diagnosis.diagnose`.

    ``gpu`` and ``cpu`` names get their group as a prefix (``gpu_util_pct``, ``cpu_util_pct``,
    ``gpu_mem_used_gb``, ``cpu_rss_gb``) because both groups have ``util_pct``; ``time`` and
    ``throughput`` names are used as they are (``data_wait_pct``, ``samples_per_sec``).
    """
    return f"{group}_{name}" if group in (GPU, CPU) else name
