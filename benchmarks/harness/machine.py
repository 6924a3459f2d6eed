"""The machine and the versions a report was measured with."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "lightning", "lightning_mgpu", "fairscale", "horovod", "ray", "litdata", "torchdata", "numpy")


def _cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return found.group(1).strip() if found else "unknown"


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def usable_cpus() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def describe() -> dict[str, Any]:
    """CPU model and cores, GPUs (model, count, interconnect where known), OS, Python and package versions, date."""
    import torch

    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": usable_cpus(),
        "gpus": gpus,
        # NVLink/PCIe topology needs nvidia-smi; recorded only where CUDA is present and the tool answers.
        "interconnect": _interconnect() if gpus else "none (CPU, gloo on loopback)",
        # Not platform.platform(): its uname() runs `uname -p` in a subprocess (once per process).
        "os": "-".join(
            (os.uname().sysname, os.uname().release, os.uname().machine, *filter(None, platform.libc_ver()))
        ),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in PACKAGES},
    }


def _interconnect() -> str:
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return "unknown"
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return "NVLink" if "NV" in out.split("Legend")[0] else "PCIe"


def slug(machine: dict[str, Any]) -> str:
    """``<date>_<hardware>`` for the results folder, e.g. ``2026-11-25_cpu2`` or ``2026-11-25_2xH100``."""
    day = machine["date"].split()[0]
    if machine["gpus"]:
        name = re.sub(r"[^A-Za-z0-9]+", "", machine["gpus"][0].replace("NVIDIA", ""))
        return f"{day}_{len(machine['gpus'])}x{name}"
    return f"{day}_cpu{machine['cores']}"
