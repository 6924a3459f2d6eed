"""Bottleneck diagnosis from per-device training metrics: pure functions, no torch or Lightning.

:class:`~lightning_mgpu.callbacks.GPUUtilizationMonitor` calls :func:`diagnose` at the end of fit;
a dashboard can call it on logged metrics (:func:`per_device_from_metrics`) or read the JSON the
monitor writes (:func:`load_diagnoses`).

Input names (``per_device[label][name]``; every one is optional, missing or non-finite values are
ignored):

==========================  ===============================================================
``gpu_util_pct``            NVML utilisation, % of time any kernel ran (window mean)
``gpu_util_pct_min/_max``   its min / max over the window's samples
``gpu_mem_used_gb``         device memory used; ``gpu_mem_total_gb`` its capacity
``gpu_power_w``             board power; ``gpu_sm_clock_mhz`` the SM clock
``gpu_throttle_*_pct``      % of samples with clocks held back by the power cap (``power``), heat
                            (``thermal``) or a hardware slowdown (``hw_slowdown``)
``gpu_temp_c``              the hottest reading; ``gpu_energy_j`` energy used (``_per_step``: per step)
``gpu_ecc_errors``          uncorrected ECC errors since the driver loaded
``cpu_util_pct``            process CPU utilisation, normalised to the torch threads (0-100)
``cpu_util_pct_min/_max``   its min / max; ``cpu_rss_gb`` resident memory
``data_wait_pct``           % of training time spent waiting for the next batch
``data_wait_ms``            mean wait per batch
``step_ms``                 mean batch time, batch start -> batch end
``comm_pct``                % of training time spent in gradient synchronisation (estimate)
``synced_step_ms``          mean time of micro-batches that synchronise gradients (accumulation)
``unsynced_step_ms``        mean time of micro-batches that skip the sync (accumulation)
``host_syncs_per_step``     implicit host-device synchronisations per step (``detect_sync``)
``samples_per_sec``         samples per second on this device
``mfu``                     model-FLOPs utilisation (0-1)
==========================  ===============================================================

The names are those of :mod:`lightning_mgpu.monitoring.keys` with ``gpu_``/``cpu_``
prefixed to the ``gpu``/``cpu`` groups (see :func:`~lightning_mgpu.monitoring.keys.diagnosis_name`).

``context`` (optional) tailors the advice: ``strategy`` (str), ``precision`` (str),
``accelerator`` (``"cuda"``/``"cpu"``), ``num_workers`` (int), ``pin_memory`` (bool),
``batch_size`` (int, per device), ``accumulate_grad_batches`` (int).

Example::

    >>> d = diagnose({"rank0": {"data_wait_pct": 62.0, "step_ms": 4.0}, "rank1": {"data_wait_pct": 3.0}})
    >>> [x.verdict for x in d]
    ['input-bound', 'compute-bound']
    >>> print(format_table(d))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_mgpu.monitoring.keys import diagnosis_name, parse_metric_key

INPUT_BOUND = "input-bound"
COMMUNICATION_BOUND = "communication-bound"
COMPUTE_BOUND = "compute-bound"
HEALTHY = "healthy"
LOW_UTILISATION_UNEXPLAINED = "low-utilisation-unexplained"
THROTTLED = "throttled"
VERDICTS = (INPUT_BOUND, COMMUNICATION_BOUND, THROTTLED, COMPUTE_BOUND, HEALTHY, LOW_UTILISATION_UNEXPLAINED)

JSON_VERSION = 1
_MIXED = ("16-mixed", "bf16-mixed", "bf16-true", "16-true", "16", "bf16", "transformer-engine", "fp8")


@dataclass
class Diagnosis:
    """The verdict for one device, the advice that follows from it, and the numbers behind it."""

    device: str
    verdict: str
    advice: list[str]
    evidence: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Diagnosis:
        return cls(
            device=str(data["device"]),
            verdict=str(data["verdict"]),
            advice=[str(a) for a in data.get("advice", [])],
            evidence={str(k): float(v) for k, v in dict(data.get("evidence", {})).items()},
        )


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Where each verdict starts.

    Args:
        data_wait_pct: input-bound at or above this share of time waiting for data.
        busy_util_pct: a GPU at or above this utilisation is busy: a high measured data wait then
            overlapped queued GPU work (CUDA runs asynchronously) and is not a bottleneck.
        comm_pct: communication-bound at or above this share of time in gradient sync.
        sync_ratio: communication-bound when synced micro-batches take this many times as long as
            unsynced ones ...
        min_sync_gap_ms: ... and at least this many milliseconds longer (ignores timer noise).
        low_util_pct: below this GPU utilisation, with no input or communication cause,
            the verdict is low-utilisation-unexplained.
        healthy_mfu: compute-bound runs at or above this model-FLOPs utilisation are healthy.
        small_step_ms: steps shorter than this on a GPU suggest launch overhead (advice only).
        throttle_pct: throttled when the GPU's clocks were held back (power, heat, a hardware slowdown) in at least
            this share of the samples.

    Raises:
        ValueError: a percentage outside [0, 100], a ratio below 1, or a negative value.
    """

    data_wait_pct: float = 20.0
    busy_util_pct: float = 90.0
    comm_pct: float = 25.0
    sync_ratio: float = 1.5
    min_sync_gap_ms: float = 1.0
    low_util_pct: float = 60.0
    healthy_mfu: float = 0.4
    small_step_ms: float = 20.0
    throttle_pct: float = 20.0

    def __post_init__(self) -> None:
        for name in ("data_wait_pct", "busy_util_pct", "comm_pct", "low_util_pct", "throttle_pct"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise ValueError(f"DiagnosisThresholds.{name} is a percentage in [0, 100], got {value}")
        if self.sync_ratio < 1.0:
            raise ValueError(
                f"DiagnosisThresholds.sync_ratio must be >= 1 (synced vs unsynced step time), got {self.sync_ratio}"
            )
        if self.min_sync_gap_ms < 0 or self.small_step_ms < 0 or self.healthy_mfu < 0:
            raise ValueError("DiagnosisThresholds.min_sync_gap_ms, small_step_ms and healthy_mfu must be >= 0")


def _finite(values: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in values.items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            out[str(k)] = f
    return out


def _utilisation(m: Mapping[str, float]) -> tuple[str | None, float | None]:
    if "gpu_util_pct" in m:
        return "gpu_util_pct", m["gpu_util_pct"]
    if "cpu_util_pct" in m:
        return "cpu_util_pct", m["cpu_util_pct"]
    return None, None


def _is_input_bound(m: Mapping[str, float], t: DiagnosisThresholds) -> bool:
    if m.get("data_wait_pct", 0.0) < t.data_wait_pct:
        return False
    # With CUDA the host waits for data while queued kernels still run: a busy GPU is not starved.
    return m.get("gpu_util_pct", 0.0) < t.busy_util_pct


def _is_communication_bound(m: Mapping[str, float], t: DiagnosisThresholds) -> bool:
    if m.get("comm_pct", 0.0) >= t.comm_pct:
        return True
    synced, unsynced = m.get("synced_step_ms"), m.get("unsynced_step_ms")
    if synced is None or unsynced is None or unsynced <= 0:
        return False
    return synced >= t.sync_ratio * unsynced and synced - unsynced >= t.min_sync_gap_ms


def _is_mixed(precision: Any) -> bool:
    return precision is not None and str(precision) in _MIXED


def _advice_input(m: Mapping[str, float], ctx: Mapping[str, Any]) -> list[str]:
    workers, pin, cuda = ctx.get("num_workers"), ctx.get("pin_memory"), ctx.get("accelerator") == "cuda"
    cores = os.cpu_count() or 1
    # Only what the loader does not do already: a run with persistent workers is not told to set them.
    persistent = "" if ctx.get("persistent_workers") else " and set persistent_workers=True"
    if workers == 0:
        tip = (
            f"set DataLoader(num_workers=...) > 0 (up to the CPU cores per device; this host has {cores}): the training"
            " process loads every batch itself now"
        )
    elif workers is not None:
        tip = (
            f"raise DataLoader num_workers above {workers} (up to the CPU cores per device; this host has"
            f" {cores}){persistent}"
        )
    else:
        tip = f"raise DataLoader num_workers (up to the CPU cores per device){persistent}"
    advice = [tip]
    if cuda and not pin:
        advice.append("set DataLoader(pin_memory=True) so host-to-device copies are asynchronous")
    advice.append(
        "preprocess once with lightning_mgpu.data (cache the expensive __getitem__ work into a few large files)"
        " instead of per sample, per epoch"
    )
    return advice


def _advice_comm(m: Mapping[str, float], ctx: Mapping[str, Any]) -> list[str]:
    advice = []
    if ctx.get("strategy") == "dp":
        advice.append(
            "use strategy='ddp' instead of 'dp': dp scatters inputs, replicates the model and gathers outputs through"
            " one device every step"
        )
    advice.append(
        "use a bigger per-device batch (or accumulate_grad_batches) so each gradient sync is paid for by more compute"
    )
    advice.append(
        "compress gradients on the wire (a DDP comm hook such as bf16_compress_hook) and check the interconnect (NCCL"
        " over NVLink/InfiniBand, not TCP)"
    )
    return advice


def _advice_compute(m: Mapping[str, float], ctx: Mapping[str, Any], t: DiagnosisThresholds) -> list[str]:
    advice = []
    if ctx.get("accelerator") == "cpu":
        advice.append(
            "train on GPUs (or more CPU processes); on CPU, precision='bf16-mixed' only helps where the CPU has"
            " AMX/AVX512-BF16"
        )
    elif not _is_mixed(ctx.get("precision")):
        advice.append(
            "use mixed precision (Trainer(precision='bf16-mixed') on Ampere+ GPUs, '16-mixed' before): tensor cores"
            " run it several times faster"
        )
    util = m.get("gpu_util_pct")
    if util is not None and util < t.busy_util_pct:
        advice.append("use a bigger per-device batch: larger kernels keep the device busier")
    advice.append("compile the model (torch.compile) to fuse small kernels")
    return advice


def _advice_low_util(m: Mapping[str, float], ctx: Mapping[str, Any], t: DiagnosisThresholds) -> list[str]:
    advice = []
    step = m.get("step_ms")
    if step is not None and step < t.small_step_ms:
        advice.append(
            f"use a bigger per-device batch: steps of {step:.1f} ms leave the device idle between small kernels"
        )
    else:
        advice.append("use a bigger per-device batch: larger kernels keep the device busier")
    syncs = m.get("host_syncs_per_step")
    if syncs is not None and syncs > 0:
        advice.append(
            f"remove the {syncs:.1f} host-device syncs per step (.item(), .cpu(), .numpy(), torch.cuda.empty_cache() in"
            " training_step); see the call sites above"
        )
    else:
        advice.append(
            "look for host-device syncs in training_step (.item(), .cpu(), .numpy(), torch.cuda.empty_cache()): rerun"
            " with GPUUtilizationMonitor(detect_sync=True)"
        )
    if ctx.get("strategy") == "dp":
        advice.append(
            "use strategy='ddp' instead of 'dp': one Python process driving every GPU leaves them waiting for the host"
        )
    if not _is_mixed(ctx.get("precision")):
        advice.append(
            "use mixed precision (precision='bf16-mixed') and profile one step"
            " (lightning.pytorch.profilers.PyTorchProfiler)"
        )
    else:
        advice.append("profile one step (lightning.pytorch.profilers.PyTorchProfiler) to find the idle gaps")
    return advice


#: The throttle causes NVML reports, as the monitor groups them, and what to check for each.
_THROTTLE_ADVICE = {
    "power": (
        "its power cap",
        "check the limit and the draw (nvidia-smi -q -d POWER,PERFORMANCE); raise the limit where the board allows"
        " (nvidia-smi -pl), or expect these clocks",
    ),
    "thermal": (
        "heat",
        "check the cooling: fans, airflow, a blocked intake, the room's temperature (nvidia-smi -q -d"
        " TEMPERATURE,PERFORMANCE)",
    ),
    "hw_slowdown": (
        "a hardware slowdown",
        "an external power-brake signal or the power supply: check nvidia-smi -q -d PERFORMANCE and the node's power",
    ),
}


def _throttle(m: Mapping[str, float], t: DiagnosisThresholds) -> tuple[str, float] | None:
    """The throttle cause that held the clocks back most often, if at least ``throttle_pct`` of the samples."""
    shares = [(m[f"gpu_throttle_{cause}_pct"], cause) for cause in _THROTTLE_ADVICE if f"gpu_throttle_{cause}_pct" in m]
    share, cause = max(shares, default=(0.0, ""))
    return (cause, share) if shares and share >= t.throttle_pct else None


def _advice_throttled(cause: str, share: float, m: Mapping[str, float]) -> list[str]:
    what, check = _THROTTLE_ADVICE[cause]
    hottest = f" (up to {m['gpu_temp_c']:.0f} C)" if cause == "thermal" and "gpu_temp_c" in m else ""
    return [f"the GPU's clocks were held back by {what} in {share:.0f}% of the samples{hottest}: {check}"]


def _diagnose_one(device: str, m: dict[str, float], t: DiagnosisThresholds, ctx: Mapping[str, Any]) -> Diagnosis:
    d = _verdict(device, m, t, ctx)
    errors = m.get("gpu_ecc_errors")
    if errors:
        d.advice.append(
            f"{errors:.0f} uncorrected ECC error(s) on this GPU since the driver loaded: its memory is failing; take"
            " the node out of service and report it (nvidia-smi -q -d ECC)"
        )
    return d


def _verdict(device: str, m: dict[str, float], t: DiagnosisThresholds, ctx: Mapping[str, Any]) -> Diagnosis:
    # Only a GPU's utilisation is judged: a CPU process using fewer cores than its threads is not idle.
    util = m.get("gpu_util_pct")
    if _is_input_bound(m, t):
        return Diagnosis(device, INPUT_BOUND, _advice_input(m, ctx), m)
    if _is_communication_bound(m, t):
        return Diagnosis(device, COMMUNICATION_BOUND, _advice_comm(m, ctx), m)
    # A GPU held back by power or heat is busy, but slower than it can be: named before utilisation and compute.
    throttled = _throttle(m, t)
    if throttled is not None:
        return Diagnosis(device, THROTTLED, _advice_throttled(*throttled, m), m)
    if util is not None and util < t.low_util_pct:
        return Diagnosis(device, LOW_UTILISATION_UNEXPLAINED, _advice_low_util(m, ctx, t), m)
    mfu = m.get("mfu")
    if mfu is not None and mfu >= t.healthy_mfu:
        return Diagnosis(
            device, HEALTHY, ["no bottleneck found: add devices (ddp) at the same per-device batch to go faster"], m
        )
    return Diagnosis(device, COMPUTE_BOUND, _advice_compute(m, ctx, t), m)


def diagnose(
    per_device: Mapping[str, Mapping[str, float]],
    thresholds: DiagnosisThresholds | None = None,
    context: Mapping[str, Any] | None = None,
) -> list[Diagnosis]:
    """One :class:`Diagnosis` per device, in the order of ``per_device``.

    The checks run in order; the first that holds gives the verdict:

    1. **input-bound**: ``data_wait_pct >= data_wait_pct`` threshold (unless the GPU is busy anyway);
    2. **communication-bound**: ``comm_pct`` high, or synced micro-batches much slower than unsynced;
    2a. **throttled**: the GPU's clocks held back by its power cap, heat or a hardware slowdown in at least
       ``throttle_pct`` of the samples (the cause and what to check are the advice);
    3. **low-utilisation-unexplained**: GPU utilisation below ``low_util_pct`` with neither cause
       (``cpu_util_pct`` is evidence only: on CPU the verdict rests on the timings);
    4. **healthy**: ``mfu >= healthy_mfu``;
    5. **compute-bound**: otherwise: the device is the bottleneck; make the compute cheaper.

    Args:
        per_device: device label (``"rank0"``, ``"rank0_dev1"``) -> metric name -> value; the
            names are listed in the module docstring.
        thresholds: where each verdict starts; the defaults of :class:`DiagnosisThresholds`.
        context: run facts that tailor the advice (``strategy``, ``precision``, ``num_workers``, ...).

    Returns:
        The diagnoses; ``evidence`` holds the finite input numbers of that device.
    """
    t = thresholds or DiagnosisThresholds()
    ctx = dict(context or {})
    return [_diagnose_one(str(device), _finite(metrics), t, ctx) for device, metrics in per_device.items()]


def per_device_from_metrics(metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Turn logged monitor keys (``gpu/rank0/util_pct`` ...) into :func:`diagnose`'s input.

    Keys that are not the monitor's, and the all-rank keys, are skipped.

    Example::

        >>> per_device_from_metrics({"gpu/rank1/util_pct": 35.0, "time/rank1/data_wait_pct": 4.0, "loss": 1.0})
        {'rank1': {'gpu_util_pct': 35.0, 'data_wait_pct': 4.0}}
    """
    out: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        parsed = parse_metric_key(str(key))
        if parsed is None:
            continue
        group, device, name = parsed
        if device is None:
            continue
        try:
            out.setdefault(device, {})[diagnosis_name(group, name)] = float(value)
        except (TypeError, ValueError):
            continue
    return out


_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("util %", "util", "{:.0f}"),
    ("data wait %", "data_wait_pct", "{:.1f}"),
    ("comm %", "comm_pct", "{:.1f}"),
    ("step ms", "step_ms", "{:.1f}"),
    ("samples/s", "samples_per_sec", "{:.1f}"),
    ("MFU %", "mfu", "{:.1f}"),
)


def _cell(d: Diagnosis, key: str, fmt: str) -> str:
    if key == "util":
        _, value = _utilisation(d.evidence)
    else:
        value = d.evidence.get(key)
    if value is None:
        return "-"
    return fmt.format(value * 100 if key == "mfu" else value)


def format_table(diagnoses: Sequence[Diagnosis]) -> str:
    """A plain-text table: one row per device with its verdict and numbers, then the advice.

    Devices that share a verdict and advice share one advice block. ``util %`` is the GPU's
    (NVML) utilisation, or the process CPU utilisation where there is no GPU.
    """
    if not diagnoses:
        return "(no devices to diagnose)"
    header = ["device", "verdict", *(c[0] for c in _COLUMNS)]
    rows = [[d.device, d.verdict, *(_cell(d, key, fmt) for _, key, fmt in _COLUMNS)] for d in diagnoses]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Iterable[str]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(header), line("-" * w for w in widths), *(line(r) for r in rows), ""]
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for d in diagnoses:
        groups.setdefault((d.verdict, tuple(d.advice)), []).append(d.device)
    for (verdict, advice), devices in groups.items():
        out.append(f"{', '.join(devices)}: {verdict}")
        out.extend(f"  - {a}" for a in advice)
    return "\n".join(out)


def diagnoses_to_json(diagnoses: Sequence[Diagnosis], **extra: Any) -> str:
    """Serialise diagnoses (plus ``extra`` fields such as ``step`` or ``sync_sites``) as JSON."""
    return json.dumps({"version": JSON_VERSION, **extra, "diagnoses": [d.to_dict() for d in diagnoses]}, indent=2)


def write_diagnoses(path: str | os.PathLike, diagnoses: Sequence[Diagnosis], **extra: Any) -> Path:
    """Write :func:`diagnoses_to_json` to ``path`` atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(diagnoses_to_json(diagnoses, **extra))
    tmp.replace(path)
    return path


def load_diagnoses(source: str | os.PathLike) -> tuple[list[Diagnosis], dict[str, Any]]:
    """Read a file written by :func:`write_diagnoses` (or its JSON text).

    Returns:
        The diagnoses and the other top-level fields (``version``, ``step``, ``sync_sites``, ...).

    Raises:
        ValueError: the text is not a diagnosis document.
    """
    text = str(source)
    if not text.lstrip().startswith("{"):
        text = Path(source).read_text()
    data = json.loads(text)
    if not isinstance(data, dict) or "diagnoses" not in data:
        raise ValueError(
            "not a diagnosis document: expected a JSON object with a 'diagnoses' list (written by write_diagnoses)"
        )
    meta = {k: v for k, v in data.items() if k != "diagnoses"}
    return [Diagnosis.from_dict(d) for d in data["diagnoses"]], meta
