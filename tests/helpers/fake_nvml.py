"""A fake ``pynvml`` for the monitor's tests: GPUs in NVML (PCI) order with UUIDs, a sample buffer per quantity.

The fake stands in for the driver only (there is no GPU here). :func:`install_fake_gpus` puts four of them in
``sys.modules["pynvml"]`` and makes torch see only ``CUDA_VISIBLE_DEVICES=3,1``, so ``cuda:0`` is physical GPU 3.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest
import torch


class FakeGPU:
    def __init__(self, uuid: str, util: float, buffered: bool = True) -> None:
        self.uuid, self.util, self.buffered = uuid, util, buffered
        self.samples: dict[int, list[tuple[int, float]]] = {0: [], 1: [], 5: []}  # power, util, SM clock
        self.mem_used, self.mem_total = 3 * 2**30, 80 * 2**30
        self.power_mw, self.clock = 250_000, 1410
        self.power_limit_mw = 500_000
        # Read at each poll: temperature, the energy counter (mJ), PCIe KB/s, clock event reasons, ECC errors.
        self.temp_c, self.energy_mj, self.pcie_kb_s = 55, 1_000_000, {0: 2048, 1: 1024}
        self.reasons, self.ecc_errors = 0, 0
        self.unsupported: set[str] = set()  # queries that raise NVML_ERROR_NOT_SUPPORTED on this board


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def make_fake_pynvml(gpus: list[FakeGPU]) -> types.ModuleType:
    """A ``pynvml`` stand-in: devices in "PCI order", UUIDs, a sample buffer per quantity."""
    m = types.ModuleType("pynvml")
    m.__spec__ = importlib.machinery.ModuleSpec("pynvml", None)
    m.NVML_TOTAL_POWER_SAMPLES, m.NVML_GPU_UTILIZATION_SAMPLES, m.NVML_PROCESSOR_CLK_SAMPLES = 0, 1, 5
    m.NVML_CLOCK_SM, m.NVML_ERROR_NOT_SUPPORTED, m.NVML_ERROR_NOT_FOUND = 1, 3, 6
    m.NVMLError = NVMLError
    m.calls = {"init": 0, "shutdown": 0}

    def init() -> None:
        m.calls["init"] += 1

    def shutdown() -> None:
        m.calls["shutdown"] += 1

    def get_samples(h: FakeGPU, kind: int, since: int):
        if not h.buffered:
            raise NVMLError(3)
        fresh = [(ts, v) for ts, v in h.samples[kind] if ts > since]
        if not fresh:
            raise NVMLError(6)
        # value type 1 = unsigned int, as the driver reports utilisation and clocks
        return 1, [SimpleNamespace(timeStamp=ts, sampleValue=SimpleNamespace(uiVal=int(v))) for ts, v in fresh]

    m.nvmlInit, m.nvmlShutdown = init, shutdown
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    m.nvmlDeviceGetIndex = lambda h: gpus.index(h)
    # Real pynvml returns str in recent versions and bytes in old ones: exercise both.
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h.uuid}".encode() if gpus.index(h) % 2 else f"GPU-{h.uuid}"
    m.nvmlDeviceGetSamples = get_samples
    m.nvmlDeviceGetUtilizationRates = lambda h: SimpleNamespace(gpu=h.util, memory=0)
    m.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(
        used=h.mem_used, total=h.mem_total, free=h.mem_total - h.mem_used
    )
    m.nvmlDeviceGetPowerUsage = lambda h: h.power_mw
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: h.power_limit_mw
    m.nvmlDeviceGetClockInfo = lambda h, kind: h.clock
    m.NVML_TEMPERATURE_GPU, m.NVML_PCIE_UTIL_TX_BYTES, m.NVML_PCIE_UTIL_RX_BYTES = 0, 0, 1
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, m.NVML_VOLATILE_ECC = 1, 0

    def query(name: str, read: Any) -> Any:
        def call(h: FakeGPU, *args: Any) -> Any:
            if name in h.unsupported:
                raise NVMLError(3)
            return read(h, *args)

        return call

    m.nvmlDeviceGetTemperature = query("temp", lambda h, sensor: h.temp_c)
    m.nvmlDeviceGetTotalEnergyConsumption = query("energy", lambda h: h.energy_mj)
    m.nvmlDeviceGetPcieThroughput = query("pcie", lambda h, counter: h.pcie_kb_s[counter])
    m.nvmlDeviceGetCurrentClocksEventReasons = query("reasons", lambda h: h.reasons)
    m.nvmlDeviceGetTotalEccErrors = query("ecc", lambda h, kind, counter: h.ecc_errors)
    return m


def install_fake_gpus(monkeypatch: pytest.MonkeyPatch) -> list[FakeGPU]:
    """Four GPUs in NVML (PCI) order; torch sees only CUDA_VISIBLE_DEVICES=3,1 (in that order)."""
    gpus = [FakeGPU(f"0000000{i}-aaaa-bbbb-cccc-00000000000{i}", util=10.0 * (i + 1)) for i in range(4)]
    monkeypatch.setitem(sys.modules, "pynvml", make_fake_pynvml(gpus))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")

    def get_device_properties(index: int) -> Any:
        # What the CUDA runtime does: torch index i is the i-th entry of CUDA_VISIBLE_DEVICES.
        physical = int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[index])
        return SimpleNamespace(uuid=gpus[physical].uuid, name="Fake GPU")

    monkeypatch.setattr(torch.cuda, "get_device_properties", get_device_properties)
    return gpus
