"""Background samplers of device and process metrics for :class:`~lightning_mgpu.callbacks.GPUUtilizationMonitor`.

One daemon thread per process polls a list of *sources* every ``interval_s`` seconds; the training
thread only swaps out the readings once per logging window (:meth:`BackgroundSampler.collect`).

- :class:`NvmlSource` reads one GPU through NVML (``pynvml`` from nvidia-ml-py). Utilisation,
  power and SM clock come from the driver's buffered samples (``nvmlDeviceGetSamples``), so a
  window's mean covers every sample the driver took in it, not just the instants we polled;
  where the driver buffers nothing new for a quantity, the current value is read instead.
- :class:`ProcessCpuSource` reads the training process's CPU utilisation and RSS (psutil).

:func:`match_nvml_handles` finds the NVML handle of each torch CUDA device by UUID. NVML numbers
GPUs in PCI order and ignores ``CUDA_VISIBLE_DEVICES``, so ``cuda:0`` is not NVML index 0 in general.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar

from lightning.pytorch.utilities.rank_zero import rank_zero_warn

GIB = float(2**30)
#: NvmlSource's default least time between two PCIe throughput readings, in seconds
PCIE_EVERY_S = 5.0
_T = TypeVar("_T")


@dataclass
class Stat:
    """Running sum / count / min / max / last of one quantity."""

    total: float = 0.0
    count: int = 0
    min: float = math.inf
    max: float = -math.inf
    last: float = math.nan

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        self.last = value

    def merge(self, other: Stat) -> None:
        if other.count == 0:
            return
        self.total += other.total
        self.count += other.count
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.last = other.last

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else math.nan


StatSet = dict[str, Stat]


def merge_stat_sets(into: dict[str, StatSet], other: Mapping[str, StatSet]) -> None:
    """Merge ``other`` (source label -> name -> Stat) into ``into``."""
    for label, stats in other.items():
        target = into.setdefault(label, {})
        for name, stat in stats.items():
            target.setdefault(name, Stat()).merge(stat)


class Source(Protocol):
    """Something :class:`BackgroundSampler` polls: ``read()`` returns ``(name, value)`` readings."""

    label: str

    def read(self) -> Iterable[tuple[str, float]]: ...


class BackgroundSampler:
    """Polls sources on a daemon thread; :meth:`collect` hands over one window's statistics.

    A source that raises is dropped with one warning: monitoring never stops training.

    Args:
        sources: what to poll.
        interval_s: seconds between polls.

    Example::

        sampler = BackgroundSampler([ProcessCpuSource("rank0")], interval_s=0.5)
        sampler.start()
        ...
        window = sampler.collect()   # {"rank0": {"util_pct": Stat(...), "rss_gb": Stat(...)}}
        sampler.stop()
    """

    def __init__(
        self,
        sources: Sequence[Source],
        interval_s: float = 0.5,
        on_poll: Callable[[float, list[tuple[str, str, float]]], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0 seconds, got {interval_s}")
        self.sources = list(sources)
        self.interval_s = interval_s
        self.on_poll = on_poll  # every poll's (label, name, value) readings, at wall time: the time line
        self._lock = threading.Lock()
        self._window: dict[str, StatSet] = {}
        self._last: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self.poll()  # baselines (CPU times, NVML timestamps) before the first window
        self.collect()
        self._thread = threading.Thread(target=self._run, name="lightning_mgpu-monitor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(2.0, 4 * self.interval_s))
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        """Read every source once (the thread calls this; tests may call it directly)."""
        readings: list[tuple[str, str, float]] = []
        for source in list(self.sources):
            try:
                readings.extend((source.label, name, float(v)) for name, v in source.read())
            except Exception as err:  # noqa: BLE001  (a broken sensor must not stop training)
                rank_zero_warn(
                    f"GPUUtilizationMonitor: stopped reading {type(source).__name__}({source.label}): {err!r}"
                )
                self.sources.remove(source)
        with self._lock:
            for label, name, value in readings:
                if math.isfinite(value):
                    self._window.setdefault(label, {}).setdefault(name, Stat()).add(value)
                    self._last.setdefault(label, {})[name] = value
        if self.on_poll is not None:
            self.on_poll(time.time(), [r for r in readings if math.isfinite(r[2])])

    def collect(self) -> dict[str, StatSet]:
        """This window's statistics, and start a new window.

        A quantity without a reading in the window (a window shorter than the poll interval)
        carries its last reading forward, so short windows are never empty.
        """
        with self._lock:
            window, self._window = self._window, {}
            last = {label: dict(values) for label, values in self._last.items()}
        for label, values in last.items():
            stats = window.setdefault(label, {})
            for name, value in values.items():
                if name not in stats:
                    stats.setdefault(name, Stat()).add(value)
        return window


class ProcessCpuSource:
    """CPU utilisation and resident memory of one process (default: this one).

    ``util_pct`` is process CPU time over wall time, divided by ``threads`` (the cores the process
    computes with: torch's intra-op threads by default), so 100 means those cores are fully busy.

    Args:
        label: the device label the readings belong to.
        threads: the normaliser; default ``torch.get_num_threads()``.
        pid: the process to read; default this process.
    """

    def __init__(self, label: str, threads: int | None = None, pid: int | None = None) -> None:
        import torch

        from lightning_mgpu.utilities.imports import require

        psutil = require("psutil", "GPUUtilizationMonitor's CPU sampling")
        self.label = label
        self.threads = max(1, threads if threads is not None else torch.get_num_threads())
        self._proc = psutil.Process(pid)
        self._last: tuple[float, float] | None = None

    def _cpu_seconds(self) -> float:
        t = self._proc.cpu_times()
        return float(t.user + t.system)

    def read(self) -> list[tuple[str, float]]:
        now, cpu = time.monotonic(), self._cpu_seconds()
        out = [("rss_gb", self._proc.memory_info().rss / GIB)]
        if self._last is not None and now > self._last[0]:
            out.append(("util_pct", 100.0 * (cpu - self._last[1]) / (now - self._last[0]) / self.threads))
        self._last = (now, cpu)
        return out


_VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _sample_value(value_type: int, sample: Any) -> float:
    return float(getattr(sample.sampleValue, _VALUE_FIELDS.get(value_type, "uiVal")))


class _BufferedSeries:
    """One NVML quantity read from the driver's sample buffer, or polled where it has none."""

    def __init__(
        self, nvml: ModuleType, handle: Any, sampling_type: int, instant: Callable[[], float], scale: float
    ) -> None:
        self.nvml, self.handle, self.sampling_type, self.instant, self.scale = (
            nvml,
            handle,
            sampling_type,
            instant,
            scale,
        )
        self.buffered = True
        self._since = 0
        self._primed = False

    def read(self) -> list[float]:
        if self.buffered:
            try:
                values = self._read_buffer()
            except self.nvml.NVMLError as err:
                if getattr(err, "value", None) != getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
                    raise
                self.buffered = False  # e.g. MIG instances, older boards: poll from now on
            else:
                if values:
                    return values
                # No new driver sample since the last poll (or none buffered for this quantity).
        return [self.instant() * self.scale]

    def _read_buffer(self) -> list[float]:
        try:
            value_type, samples = self.nvml.nvmlDeviceGetSamples(self.handle, self.sampling_type, self._since)
        except self.nvml.NVMLError as err:
            if getattr(err, "value", None) == getattr(self.nvml, "NVML_ERROR_NOT_FOUND", 6):
                self._primed = True  # an empty buffer: every later sample is new
                return []  # no new sample since the last read
            raise
        fresh = [s for s in samples if s.timeStamp > self._since]
        if fresh:
            self._since = max(s.timeStamp for s in fresh)
        if not self._primed:
            # The first read returns the whole buffer, from before training: only keep its timestamp.
            self._primed = True
            return []
        return [_sample_value(value_type, s) * self.scale for s in fresh]


#: NVML's clock event (throttle) reason bits, grouped as the time line records them: the share of samples in which
#: any bit of a group was set. (Idle, application clocks, sync boost and display clocks are not slowdowns.)
THROTTLE_GROUPS = {
    "throttle_power_pct": 0x4 | 0x80,  # software power cap | hardware power brake
    "throttle_thermal_pct": 0x20 | 0x40,  # software | hardware thermal slowdown
    "throttle_hw_slowdown_pct": 0x8,  # hardware slowdown (an external signal or the power supply)
}


class NvmlSource:
    """One GPU through NVML: utilisation, memory, power and SM clock from the driver's sample buffers; temperature,
    energy, throttle reasons and ECC errors read at each poll; PCIe throughput at most every ``pcie_every_s``. A
    query the board or driver does not support is left out from then on.

    Args:
        label: the device label (``rank0``, ``rank0_dev1``).
        nvml: the ``pynvml`` module (initialised).
        handle: the NVML device handle (see :func:`match_nvml_handles`).
        pcie_every_s: the least time between two PCIe readings. NVML counts the bytes of each direction over 20 ms
            inside the call, so a reading holds the sampler thread 40 ms per GPU (320 ms of a 0.5 s poll for 8 GPUs
            under ``dp``); 0 reads it at every poll.
    """

    def __init__(self, label: str, nvml: ModuleType, handle: Any, pcie_every_s: float = PCIE_EVERY_S) -> None:
        self.label, self.nvml, self.handle = label, nvml, handle
        self.pcie_every_s = pcie_every_s
        self._pcie_due = 0.0  # time.monotonic() from which the next PCIe reading is taken
        n = nvml
        self._series = {
            "util_pct": _BufferedSeries(
                n, handle, n.NVML_GPU_UTILIZATION_SAMPLES, lambda: n.nvmlDeviceGetUtilizationRates(handle).gpu, 1.0
            ),
            "power_w": _BufferedSeries(
                n, handle, n.NVML_TOTAL_POWER_SAMPLES, lambda: n.nvmlDeviceGetPowerUsage(handle), 1e-3
            ),
            "sm_clock_mhz": _BufferedSeries(
                n, handle, n.NVML_PROCESSOR_CLK_SAMPLES, lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM), 1.0
            ),
        }
        self._unsupported: set[str] = set()
        # Read at each poll: NVML keeps no sample buffer for these.
        clock_reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )  # renamed in NVML 12.5; the old name is gone from newer pynvml
        self._instant: dict[str, Callable[[], float]] = {
            "temp_c": lambda: float(n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
            "ecc_errors": lambda: float(
                n.nvmlDeviceGetTotalEccErrors(handle, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
            ),
        }
        # Read every pcie_every_s: each call blocks 20 ms in the driver (KB/s over that interval).
        self._pcie: dict[str, Callable[[], float]] = {
            "pcie_tx_mb_s": lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_TX_BYTES) / 1024.0,
            "pcie_rx_mb_s": lambda: n.nvmlDeviceGetPcieThroughput(handle, n.NVML_PCIE_UTIL_RX_BYTES) / 1024.0,
        }
        self._clock_reasons: Callable[[Any], int] | None = clock_reasons
        self._energy_mj: float | None = None  # NVML's energy counter at the previous poll (mJ since the driver loaded)
        #: NVML's index of this GPU (PCI order, the physical index; ``CUDA_VISIBLE_DEVICES`` does not renumber it)
        #: and its enforced power limit in W: what MLflow names and divides by. ``None`` where NVML does not say.
        self.nvml_index: int | None = self._ask(lambda: int(n.nvmlDeviceGetIndex(handle)))
        self.power_limit_w: float | None = self._ask(lambda: n.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0)
        uuid = self._ask(lambda: n.nvmlDeviceGetUUID(handle))
        self.uuid: str | None = (uuid.decode() if isinstance(uuid, bytes) else str(uuid)) if uuid is not None else None

    @staticmethod
    def _ask(query: Callable[[], Any]) -> Any:
        try:
            return query()
        except Exception:  # noqa: BLE001  (an old driver or a board without the query: the exports do without)
            return None

    def read(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        out += [("mem_used_gb", mem.used / GIB), ("mem_total_gb", mem.total / GIB)]
        for name, series in self._series.items():
            values = self._supported(name, series.read)  # e.g. no power sensor: log the rest
            out += [(name, v) for v in values or ()]
        instant = dict(self._instant)
        now = time.monotonic()
        if now >= self._pcie_due:
            instant.update(self._pcie)
            self._pcie_due = now + self.pcie_every_s
        for name, query in instant.items():
            value = self._supported(name, query)
            if value is not None:
                out.append((name, value))
        clock_reasons = self._clock_reasons
        if clock_reasons is not None:
            reasons = self._supported("throttle", lambda: float(clock_reasons(self.handle)))
            if reasons is not None:
                out += [(name, 100.0 if int(reasons) & bits else 0.0) for name, bits in THROTTLE_GROUPS.items()]
        # Energy: what the board used since the previous poll (the counter is cumulative); the first poll sets it.
        energy = self._supported("energy_j", lambda: float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)))
        if energy is not None:
            if self._energy_mj is not None and energy >= self._energy_mj:
                out.append(("energy_j", (energy - self._energy_mj) / 1000.0))
            self._energy_mj = energy
        return out

    def _supported(self, name: str, query: Callable[[], _T]) -> _T | None:
        """``query()``, or ``None`` (and never again) where NVML says the device does not support it."""
        if name in self._unsupported:
            return None
        try:
            return query()
        except AttributeError:  # a pynvml without this query (or without the constant it takes)
            self._unsupported.add(name)
            return None
        except self.nvml.NVMLError as err:
            if getattr(err, "value", None) not in (
                getattr(self.nvml, "NVML_ERROR_NOT_SUPPORTED", 3),
                getattr(self.nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
            ):
                raise
            self._unsupported.add(name)
            return None


def _normalise_uuid(uuid: Any) -> str:
    text = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def torch_device_uuid(index: int) -> str:
    """The UUID of torch's ``cuda:index`` (after ``CUDA_VISIBLE_DEVICES`` remapping)."""
    import torch

    return str(torch.cuda.get_device_properties(index).uuid)


def match_nvml_handles(
    nvml: ModuleType, indices: Sequence[int], uuid_of: Callable[[int], str] = torch_device_uuid
) -> dict[int, Any]:
    """NVML handle of each torch CUDA device index, matched by UUID.

    A device without a match (e.g. a MIG slice NVML cannot sample) is left out with a warning;
    it is never guessed by index, which is wrong under ``CUDA_VISIBLE_DEVICES``.

    Args:
        nvml: the initialised ``pynvml`` module.
        indices: torch CUDA device indices.
        uuid_of: index -> UUID (torch's by default).
    """
    by_uuid: dict[str, Any] = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        by_uuid[_normalise_uuid(nvml.nvmlDeviceGetUUID(handle))] = handle
    found: dict[int, Any] = {}
    for index in indices:
        uuid = _normalise_uuid(uuid_of(index))
        if uuid in by_uuid:
            found[index] = by_uuid[uuid]
        else:
            rank_zero_warn(
                f"GPUUtilizationMonitor: no NVML device has the UUID of cuda:{index} ({uuid}); its GPU metrics are not"
                " logged. (MIG slices and some containers hide the physical GPU from NVML.)"
            )
    return found
